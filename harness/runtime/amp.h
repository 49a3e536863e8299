/* amp.h - automatic mixed precision: torch.autocast("cuda", dtype) and torch.amp.GradScaler.
 *
 * Autocast (autocast_mode.cpp): inside a region, linear/addmm/mm cast their f32 operands to the autocast dtype
 * (f16 or bf16) and run on the tensor cores; log_softmax, nll_loss and mse_loss cast half operands to f32. The
 * weights stay f32 ("master weights"); their casts are cached for the region (cached_cast: a leaf that requires
 * grad is cast once per region, and the cache is cleared when the outermost region exits), while activations
 * are cast at every use. The casts are real ops: they allocate, and ToCopyBackward0 brings gradients back to
 * f32.
 *
 * GradScaler (f16 training): scale(loss) multiplies by the scale (a 0-dim f32 device tensor made at the first
 * call, as PyTorch's _scale, beside its _growth_tracker); step() unscales every gradient in place, checking for
 * inf/NaN (found_inf, one 0-dim tensor), and skips optimizer.step() when it found one; update() halves the scale
 * after an overflow and doubles it after growth_interval clean steps.
 */
#ifndef OOMLAB_AMP_H
#define OOMLAB_AMP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/compat.h"
#include "runtime/optim.h"
#include "runtime/tensor.h"

OOM_BEGIN_DECLS

/* Enter / leave an autocast region (nestable). dt is DT_F16 or DT_BF16. */
void amp_autocast_enter(rt *r, dtype dt);
void amp_autocast_exit(rt *r);
/* Drop the weight-cast cache (autocast's clear_cache). */
void amp_cache_clear(rt *r);
/* Free what autocast kept (rt_close calls it). */
void amp_close(rt *r);

/* Autocast's wrappers cast an op's arguments as `(*F)(cached_cast(dtype, args, device_type)...)`
 * (aten/src/ATen/autocast_mode.h): function arguments, which GCC (PyTorch's Linux builds) evaluates last to first.
 * Ops call these for their operands in that order, the last argument first: which cast is allocated first, and
 * which ToCopyBackward0 gets the larger sequence number (so runs first in backward), follow from it. */

/* For ops: a matmul operand as autocast wants it (a new reference: the cast, or t itself retained). */
tensor *amp_autocast_matmul_operand(rt *r, tensor *t);
/* For ops on autocast's f32 list: t cast to f32 inside a region when it is half (a new reference). */
tensor *amp_autocast_f32_operand(rt *r, tensor *t);

typedef struct grad_scaler {
    rt *rt;
    double init_scale, growth_factor, backoff_factor;
    int growth_interval;
    tensor *scale;          /* _scale: 0-dim f32, made lazily */
    tensor *growth_tracker; /* _growth_tracker: 0-dim (PyTorch: int32; here f32, the same 512-byte block) */
    double scale_value;     /* the host's copy of the scale (the device value is what multiplies) */
    int clean_steps;
    bool found_inf;         /* the last step() skipped the optimizer */
    int64_t skipped_steps;
} grad_scaler;

/* torch.amp.GradScaler("cuda", init_scale=65536.0, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000). */
void grad_scaler_init(grad_scaler *s, rt *r);
void grad_scaler_free(grad_scaler *s);
/* scaler.scale(loss): loss * scale (a new reference, differentiable). */
tensor *grad_scaler_scale(grad_scaler *s, tensor *loss);
/* scaler.step(optimizer): unscale the gradients, check them, step unless one was inf/NaN. */
oom_status grad_scaler_step(grad_scaler *s, optimizer *o);
/* scaler.update(). */
oom_status grad_scaler_update(grad_scaler *s);

OOM_END_DECLS

#endif
