"""The device allocations the CUDA path makes that the program's ops do not (or makes differently from meta).

One module per concern; each size names the PyTorch 2.11 source it follows:
  cublas.py     cuBLAS / cuBLASLt workspaces per handle and stream (CublasHandlePool.cpp, Blas.cpp)
  reduction.py  ATen reduction staging buffers (Reduce.cuh's setReduceConfig; harness/runtime/reduce_config.c)
  attention.py  scaled_dot_product_attention's backend choice (sdp_utils.cpp) and what each backend saves
  dropout.py    F.dropout -> native_dropout: output plus a 1-byte mask (Dropout.cpp, cuda/Dropout.cu)
  autocast.py   autocast's casts and weight-cast cache (autocast_mode.cpp/.h), which meta ignores
  cudnn.py      cuDNN convolution workspaces: an upper bound per architecture (Conv_v8.cpp)
  subclass.py   the out-of-place paths meta takes because it counts as subclass-like (AccumulateGrad)
  foreach.py    the optimizer and clip_grad foreach paths CUDA takes (torch/utils/_foreach_utils.py)
"""
