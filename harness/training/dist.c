/* dist.c - torch.distributed's collectives on tensors. See dist.h. */
#include "training/dist.h"

static devptr addr(const tensor *t) { return t->st->ptr + t->offset; }

/* out[k] is written: numel of out = out_mul x the collective's count, in = in_mul x it */
static oom_status run(devcomm *c, devcomm_op op, tensor *const *out, tensor *const *in, int64_t out_mul,
                      int64_t in_mul, int root)
{
    rt *r0 = out[0]->rt;
    devptr send[DEVCOMM_MAX_RANKS], recv[DEVCOMM_MAX_RANKS];
    int64_t count = tensor_numel(in[0]) / in_mul;
    for (int k = 0; k < c->n; k++) {
        if (!out[k] || !in[k] || out[k]->rt->dev != c->devs[k] || in[k]->rt->dev != c->devs[k] ||
            !tensor_is_contiguous(out[k]) || !tensor_is_contiguous(in[k]) || out[k]->dt != in[0]->dt ||
            in[k]->dt != in[0]->dt || tensor_numel(in[k]) != count * in_mul || tensor_numel(out[k]) != count * out_mul)
            return rt_fail(r0, OOM_EINVAL, "%s: rank %d's tensors do not match the collective (device, dtype, numel, "
                                           "contiguity)",
                           devcomm_op_str(op), k);
        send[k] = addr(in[k]);
        recv[k] = addr(out[k]);
    }
    oom_status st = devcomm_run(c, op, send, recv, (size_t)count, in[0]->dt, root);
    if (st != OOM_OK)
        return rt_fail(r0, st, "%s: %s", devcomm_op_str(op), oom_error_msg());
    for (int k = 0; k < c->n; k++)
        out[k]->st->version++;
    return OOM_OK;
}

oom_status dist_all_reduce(devcomm *c, tensor *const *t) { return run(c, COMM_ALL_REDUCE, t, t, 1, 1, 0); }

oom_status dist_broadcast(devcomm *c, tensor *const *t, int src) { return run(c, COMM_BROADCAST, t, t, 1, 1, src); }

oom_status dist_all_gather_into_tensor(devcomm *c, tensor *const *out, tensor *const *in)
{
    return run(c, COMM_ALL_GATHER, out, in, c->n, 1, 0);
}

oom_status dist_reduce_scatter_tensor(devcomm *c, tensor *const *out, tensor *const *in)
{
    return run(c, COMM_REDUCE_SCATTER, out, in, 1, c->n, 0);
}
