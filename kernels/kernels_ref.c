/* kernels_ref.c - the table of CPU reference kernels (the sim backend computes with these). */
#include "kernels.h"

static oom_status ref_sync(void) { return OOM_OK; } /* the references run synchronously */

#define KERNEL_REF_ENTRY(name, params) .name = k_##name##_ref,

const kernel_ops kernels_ref = {.name = "ref", KERNEL_LIST(KERNEL_REF_ENTRY).sync = ref_sync};
