/* parity.h - `oomlab parity`: the runtime's memory on the workloads of scripts/twins/mlp_parity.py.
 *
 * Each workload is the twin's PyTorch loop written with the runtime, statement for statement (Python's
 * `x = f(...)` is tensor_assign: the new value exists before the old one is released), on the canonical MLP
 * (width 4096, depth 4, 10 classes, batch 256):
 *   eval_leak    grad enabled, total = total + loss       memory_allocated() after each of 6 steps
 *   eval_item    total += loss.item()                    (flat)
 *   eval_nograd  under no_grad                           (flat)
 *   train_sgd    SGD(lr=0.01, momentum=0.9), 3 steps     allocated and max allocated after each step
 *   train_adam   Adam(lr=1e-3), 3 steps
 *   rnn_chain    RNNCell(256, 512), batch 64, hidden state not detached, backward(retain_graph=True)
 * It prints one JSON object per workload with the twin's keys ("allocated_per_step", "bytes_per_step",
 * "steady_allocated", ...), so scripts/parity_table.py can set the two side by side (docs/parity.md). On sim it
 * runs dry (full scale, accounting only): memory does not depend on the values.
 */
#ifndef OOMLAB_PARITY_H
#define OOMLAB_PARITY_H

#include <cJSON.h>
#include <stdbool.h>

#include "core/compat.h"
#include "device/device.h"
#include "core/status.h"

OOM_BEGIN_DECLS

#define PARITY_SCHEMA "oomlab.parity/1" /* a workload's JSON object: its memory, step by step */

extern const char *const parity_workloads[];
extern const size_t parity_nworkloads;

/* Run one workload on a fresh runtime. *out gets the JSON object (the caller frees it). OOM_EINVAL for an
 * unknown workload; otherwise the runtime's failure, with the reason in the last-error record. */
oom_status parity_run(const char *workload, device_kind backend, cJSON **out);

OOM_END_DECLS

#endif
