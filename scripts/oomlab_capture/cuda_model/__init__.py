"""The device allocations the CUDA path makes that the program's ops do not (or makes differently from meta).

One module per concern; each size names the PyTorch 2.11 source it follows:
  cublas.py     cuBLAS / cuBLASLt workspaces per handle and stream (CublasHandlePool.cpp, Blas.cpp)
  reduction.py  ATen reduction staging buffers (Reduce.cuh's setReduceConfig; harness/runtime/reduce_config.c)
  attention.py  scaled_dot_product_attention's backend choice (sdp_utils.cpp: cuDNN attention first on sm 9.0/10.x)
                and what each backend saves and allocates (cudnn/MHA.cpp, cudnn-frontend, flash/efficient kernels)
  dropout.py    F.dropout -> native_dropout: output plus a 1-byte mask (Dropout.cpp, cuda/Dropout.cu)
  autocast.py   autocast's casts and weight-cast cache (autocast_mode.cpp/.h), which meta ignores
  subclass.py   the out-of-place paths meta takes because it counts as subclass-like (AccumulateGrad, the
                autograd input buffer, F.linear's bias add)
  foreach.py    the optimizer and clip_grad foreach paths CUDA takes (torch/utils/_foreach_utils.py) and
                _foreach_norm's staging (ForeachReduceOp.cu)
  rnn.py        GRUCell/LSTMCell through CUDA's fused cell kernels (RNN.cpp, cuda/RNN.cu)
  batch_norm.py native_batch_norm(_backward) as CUDA's native kernels run it on a channels-last-compatible input
                (BatchNorm1d's [N, C]): the backward's sum_dy/sum_dy_xmu, its order, the reductions' staging
                (cuda/Normalization.cu, Normalization.cuh)
  loss.py       mse_loss/smooth_l1_loss with a reduction: the structured kernel's output storage and unreduced
                loss (Loss.cpp)
  composite.py  ops CUDA runs differently from meta's function (mean/sum without dim) and the temporaries of
                embedding, boolean-mask indexing, layer_norm and pow.Scalar
  embedding.py  embedding_dense_backward's two paths: the feature kernel (<= 3072 indices) and the sort path
                (cub's radix sort, unique_by_key and scan temporaries, EmbeddingBackwardKernel.cu's segment buffers)
  compiled.py   torch.compile: Dynamo, AOTAutograd and Inductor run for the GPU on the CPU, the generated wrapper's
                buffers, extern kernels and first-run autotuning recorded (compile_fx, codegen/wrapper.py,
                runtime/triton_heuristics.py)
"""
