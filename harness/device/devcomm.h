/* devcomm.h - a communicator over N devices and its collectives: all_reduce, reduce_scatter, all_gather, broadcast,
 * as torch.distributed's NCCL process group runs them, one rank per device.
 *
 * Two engines sit behind it:
 *   nccl    every device is a GPU of its own (cuda): libnccl.so.2, opened with dlopen on first use (so the binary
 *           builds and starts without it and says in one line when it is missing), one communicator per GPU from
 *           ncclCommInitAll in this process, each collective issued for every rank inside ncclGroupStart/End on
 *           the default streams and synchronised before it returns (ProcessGroupNCCL's work.wait() followed by
 *           the host's next step: the caching allocator sees the same frees at the same points on both engines).
 *   staged  sim devices, or cuda ranks that share a GPU (logical devices: NCCL refuses two ranks on one GPU):
 *           every rank's bytes are copied to the host, combined there (sum in float32, or bytes in order), and
 *           copied back into each rank's output. The same bytes land in the same buffers; nothing is allocated
 *           from any caching allocator on either engine, so per-rank allocator counters are byte-identical.
 *
 * NCCL's own device buffers. libnccl cudaMallocs its channels' buffers itself, outside PyTorch's allocator: they
 * show only as the process's non-PyTorch memory ("Including non-PyTorch memory, this process has X memory in use"
 * of PyTorch's OOM message, and cudaMemGetInfo's free). On nccl they are measured: cudaMemGetInfo on every GPU
 * before ncclCommInitAll and after a first collective of each kind on a scratch buffer (freed before the second
 * reading), the difference per rank. On sim they are not derived but charged as measured, to each device with
 * device_external_charge (so the OOM message counts them as PyTorch's does): DEVCOMM_SIM_NCCL_BYTES per rank, what
 * NCCL 2.28.9 took on each of 2 NVLink-connected H200s (driver 580.159.04, NCCL_NVLS_ENABLE=0; oomlab run
 * data_parallel --backend cuda, docs/measurements/h200x2-2026-11-27-nccl/). The buffers of NCCL's three protocols alone (NCCL_BUFFSIZE 4 MiB
 * SIMPLE, 4,915,200 B LL128, 524,288 B LL per connection, 10 MiB with cuMem's 2 MiB granularity) explain 20 MiB
 * at 2 channels; the rest of the measured 866 MiB (how many channels NCCL's topology search opens on NVLink, and
 * what else it allocates at init) is not derived here, so the measurement stands in for a model. Other GPUs, NCCL versions and rank counts are not measured: sim charges the same
 * figure for any N >= 2 ranks and says so in its note.
 *
 * Invariant: n >= 1 ranks, devs[k] borrowed (outlive the communicator); bytes_moved[k] counts what rank k sent
 * into collectives (its send buffer's bytes), external[k] what is charged to (sim) or was measured on (nccl)
 * device k for NCCL's buffers.
 */
#ifndef OOMLAB_DEVCOMM_H
#define OOMLAB_DEVCOMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/compat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "device/device.h"

OOM_BEGIN_DECLS

#define DEVCOMM_MAX_RANKS 8
/* NCCL's buffers per rank as measured on 2 x H200, NCCL 2.28.9 (cudaMemGetInfo, see the file comment) */
#define DEVCOMM_SIM_NCCL_BYTES ((size_t)866 << 20)

typedef enum devcomm_engine { DEVCOMM_STAGED, DEVCOMM_NCCL } devcomm_engine;
const char *devcomm_engine_str(devcomm_engine e); /* "staged", "nccl" */

typedef enum devcomm_op { COMM_ALL_REDUCE, COMM_REDUCE_SCATTER, COMM_ALL_GATHER, COMM_BROADCAST, COMM_NOPS } devcomm_op;
const char *devcomm_op_str(devcomm_op op);

typedef struct devcomm {
    int n;
    device *devs[DEVCOMM_MAX_RANKS];
    devcomm_engine engine;
    bool modelled;                      /* external[] is sim's charge (a past measurement), not this run's */
    size_t external[DEVCOMM_MAX_RANKS]; /* NCCL's buffers on each device */
    uint64_t bytes_moved[DEVCOMM_MAX_RANKS];
    uint64_t calls[COMM_NOPS];
    char why[200]; /* why this engine (a line for the reader) */
    struct devnccl *nccl;
} devcomm;

/* The bytes sim charges each rank of an n-rank communicator for NCCL's buffers (see the file comment). */
size_t devcomm_model_bytes(int n);

/* Open a communicator over devs[0..n): nccl when every device is cuda with a GPU of its own and libnccl loads,
 * else staged (why says which and why). A device that cannot hold the modelled buffers: OOM_ENOMEM_DEVICE, nothing
 * charged. NCCL's failure: OOM_ECUDA with NCCL's error in the last-error record. */
oom_status devcomm_open(device *const *devs, int n, devcomm **out);
/* Give the buffers back (ncclCommDestroy; sim: the charge released). NULL is fine. */
void devcomm_close(devcomm *c);

/* The collectives, for every rank at once (send[k], recv[k] device addresses on devs[k]), summing for the
 * reductions (ncclSum); count elements of dt:
 *   all_reduce      count elements, recv[k] = sum over ranks of send[k] (send == recv: in place);
 *   reduce_scatter  send[k] holds n * count, recv[k] gets chunk k (count) of the sum;
 *   all_gather      send[k] holds count, recv[k] gets n * count, rank j's at chunk j;
 *   broadcast       count elements of root's send into every recv[k].
 * The data moves only where the devices keep values (not in a sim dry run); the counters move either way. */
oom_status devcomm_run(devcomm *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count, dtype dt,
                       int root);

/* cuda's NCCL engine (nccl.cu; stubs without the cuda backend). init measures external[k] as the file comment says.
 * OOM_EUNSUPPORTED with the reason in why when libnccl cannot be opened. */
oom_status devnccl_init(device *const *devs, int n, struct devnccl **out, size_t *external, char *why, size_t whycap);
oom_status devnccl_run(struct devnccl *c, devcomm_op op, const devptr *send, const devptr *recv, size_t count,
                       dtype dt, int root);
void devnccl_free(struct devnccl *c);

OOM_END_DECLS

#endif
