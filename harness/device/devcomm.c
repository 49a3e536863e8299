/* devcomm.c - the communicator and its collectives on both engines. See devcomm.h. */
#include "device/devcomm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *devcomm_engine_str(devcomm_engine e) { return e == DEVCOMM_NCCL ? "nccl" : "staged"; }

const char *devcomm_op_str(devcomm_op op)
{
    static const char *const names[COMM_NOPS] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast"};
    return (unsigned)op < COMM_NOPS ? names[op] : "unknown";
}

size_t devcomm_model_bytes(int n) { return n > 1 ? DEVCOMM_SIM_NCCL_BYTES : 0; }

/* Every device a GPU of its own: NCCL can run it. */
static bool distinct_gpus(device *const *devs, int n)
{
    for (int k = 0; k < n; k++) {
        if (devs[k]->kind != DEVICE_CUDA)
            return false;
        for (int j = 0; j < k; j++)
            if (device_cuda_ordinal(devs[j]) == device_cuda_ordinal(devs[k]))
                return false;
    }
    return true;
}

oom_status devcomm_open(device *const *devs, int n, devcomm **out)
{
    if (!devs || !out || n < 1 || n > DEVCOMM_MAX_RANKS)
        return OOM_EINVAL;
    devcomm *c = calloc(1, sizeof *c);
    if (!c)
        return OOM_ENOMEM_HOST;
    c->n = n;
    for (int k = 0; k < n; k++)
        c->devs[k] = devs[k];
    if (n > 1 && (devs[0]->kind == DEVICE_SIM || distinct_gpus(devs, n)))
        for (int k = 0; k < n; k++) /* NCCL initialised: the driver lays segments out as in such a process */
            device_note_nccl(devs[k], DEVICE_NCCL_INIT);
    if (distinct_gpus(devs, n)) {
        oom_status st = devnccl_init(devs, n, &c->nccl, c->external, c->why, sizeof c->why);
        if (st == OOM_OK) {
            c->engine = DEVCOMM_NCCL;
            *out = c;
            return OOM_OK;
        }
        if (st != OOM_EUNSUPPORTED) { /* NCCL is there and failed: not something to work around */
            free(c);
            return st;
        }
        /* no libnccl: staged through the host, said in why */
    } else if (devs[0]->kind == DEVICE_CUDA) {
        snprintf(c->why, sizeof c->why,
                 "collectives staged through the host: the ranks share a GPU (NCCL needs one GPU per rank)");
    } else {
        snprintf(c->why, sizeof c->why,
                 "sim: collectives staged through the host; NCCL's buffers charged as measured for 2 ranks on 2 x "
                 "H200 (NCCL 2.28.9)%s",
                 n > 2 ? ", not measured for more ranks" : "");
    }
    c->engine = DEVCOMM_STAGED;
    if (devs[0]->kind == DEVICE_SIM) {
        c->modelled = true;
        size_t each = devcomm_model_bytes(n);
        for (int k = 0; k < n; k++) {
            oom_status st = device_external_charge(devs[k], each);
            if (st != OOM_OK) {
                for (int j = 0; j < k; j++)
                    device_external_release(devs[j], each);
                free(c);
                OOM_ERROR(st, "NCCL's buffers (%zu B) do not fit on device %d", each, k);
                return st;
            }
            c->external[k] = each;
        }
    }
    *out = c;
    return OOM_OK;
}

void devcomm_close(devcomm *c)
{
    if (!c)
        return;
    if (c->nccl)
        devnccl_free(c->nccl);
    if (c->modelled)
        for (int k = 0; k < c->n; k++)
            device_external_release(c->devs[k], c->external[k]);
    free(c);
}

/* ---- the staged engine ------------------------------------------------------------------------------------ */

/* Whether device k keeps values (a sim dry run keeps none: nothing to move). */
static bool has_values(device *d, devptr p) { return d->kind != DEVICE_SIM || device_host_view(d, p) != NULL; }

static void add_into(float *acc, const void *src, size_t count, dtype dt, bool first)
{
    for (size_t i = 0; i < count; i++) {
        float v = dt == DT_F32    ? ((const float *)src)[i]
                  : dt == DT_F16  ? f16_to_f32(((const uint16_t *)src)[i])
                                  : bf16_to_f32(((const uint16_t *)src)[i]);
        acc[i] = first ? v : acc[i] + v;
    }
}

static void store_from(void *dst, const float *acc, size_t count, dtype dt)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == DT_F32)
            ((float *)dst)[i] = acc[i];
        else if (dt == DT_F16)
            ((uint16_t *)dst)[i] = f32_to_f16(acc[i]);
        else
            ((uint16_t *)dst)[i] = f32_to_bf16(acc[i]);
    }
}

#define STAGE_ELEMS ((size_t)1 << 20) /* elements staged at a time: bounded host memory for any size */

/* recv[k] + rdst = sum over ranks of (send[j] + ssrc), count elements, for the ranks k in [k0, k1). */
static oom_status staged_reduce(devcomm *c, const devptr *send, size_t ssrc, const devptr *recv, size_t rdst,
                                int k0, int k1, size_t count, dtype dt, float *acc, void *tmp)
{
    size_t es = dtype_size(dt);
    for (size_t at = 0; at < count; at += STAGE_ELEMS) {
        size_t m = count - at < STAGE_ELEMS ? count - at : STAGE_ELEMS;
        for (int j = 0; j < c->n; j++) {
            oom_status st = device_copy_dtoh(c->devs[j], tmp, send[j] + ssrc + at * es, m * es);
            if (st != OOM_OK)
                return st;
            add_into(acc, tmp, m, dt, j == 0);
        }
        store_from(tmp, acc, m, dt);
        for (int k = k0; k < k1; k++) {
            oom_status st = device_copy_htod(c->devs[k], recv[k] + rdst + at * es, tmp, m * es);
            if (st != OOM_OK)
                return st;
        }
    }
    return OOM_OK;
}

/* recv[k] + rdst = src's bytes at s, for every rank k. */
static oom_status staged_copy(devcomm *c, device *src, devptr s, const devptr *recv, size_t rdst, size_t bytes,
                              void *tmp)
{
    size_t chunk = STAGE_ELEMS * sizeof(float);
    for (size_t at = 0; at < bytes; at += chunk) {
        size_t m = bytes - at < chunk ? bytes - at : chunk;
        oom_status st = device_copy_dtoh(src, tmp, s + at, m);
        for (int k = 0; k < c->n && st == OOM_OK; k++)
            st = device_copy_htod(c->devs[k], recv[k] + rdst + at, tmp, m);
        if (st != OOM_OK)
            return st;
    }
    return OOM_OK;
}

static oom_status staged_run(devcomm *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count,
                             dtype dt, int root)
{
    for (int k = 0; k < c->n; k++)
        if (!has_values(c->devs[k], send[k]))
            return OOM_OK; /* a dry run: no values to move */
    if ((op == COMM_ALL_REDUCE || op == COMM_REDUCE_SCATTER) && dt == DT_I64)
        return OOM_EINVAL;
    float *acc = malloc(STAGE_ELEMS * sizeof(float));
    void *tmp = malloc(STAGE_ELEMS * sizeof(float));
    oom_status st = acc && tmp ? OOM_OK : OOM_ENOMEM_HOST;
    size_t es = dtype_size(dt);
    if (st == OOM_OK) {
        switch (op) {
        case COMM_ALL_REDUCE:
            st = staged_reduce(c, send, 0, recv, 0, 0, c->n, count, dt, acc, tmp);
            break;
        case COMM_REDUCE_SCATTER:
            for (int k = 0; k < c->n && st == OOM_OK; k++)
                st = staged_reduce(c, send, (size_t)k * count * es, recv, 0, k, k + 1, count, dt, acc, tmp);
            break;
        case COMM_ALL_GATHER:
            for (int j = 0; j < c->n && st == OOM_OK; j++)
                st = staged_copy(c, c->devs[j], send[j], recv, (size_t)j * count * es, count * es, tmp);
            break;
        case COMM_BROADCAST:
            st = staged_copy(c, c->devs[root], send[root], recv, 0, count * es, tmp);
            break;
        default:
            st = OOM_EINVAL;
        }
    }
    free(acc);
    free(tmp);
    return st;
}

oom_status devcomm_run(devcomm *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count, dtype dt,
                       int root)
{
    if (!c || !send || !recv || (unsigned)op >= COMM_NOPS || root < 0 || root >= c->n)
        return OOM_EINVAL;
    oom_status st = c->engine == DEVCOMM_NCCL ? devnccl_run(c->nccl, op, send, recv, count, dt, root)
                                              : staged_run(c, op, send, recv, count, dt, root);
    if (st != OOM_OK)
        return st;
    if (c->engine == DEVCOMM_NCCL || c->modelled)
        for (int k = 0; k < c->n; k++)
            device_note_nccl(c->devs[k], DEVICE_NCCL_COLLECTIVE);
    c->calls[op]++;
    size_t es = dtype_size(dt);
    for (int k = 0; k < c->n; k++) /* what rank k put into the collective */
        c->bytes_moved[k] += op == COMM_REDUCE_SCATTER ? (uint64_t)c->n * count * es
                             : op == COMM_BROADCAST    ? (k == root ? (uint64_t)count * es : 0)
                                                       : (uint64_t)count * es;
    return OOM_OK;
}
