"""The name of one convolution call, the same on the GPU (where the cuDNN table is measured) and on meta.

key(func, args) -> str or None: for aten::convolution and aten::convolution_backward, a string of everything that
decides which path PyTorch takes and what cuDNN allocates for it (aten/src/ATen/native/Convolution.cpp
select_conv_backend, cudnn/Conv_v8.cpp's op graph: sizes, strides, dtype, the convolution's parameters, which
gradients are asked for); None for any other op. Only torch is imported here, so that
scripts/twins/predict_probes.py can use it on the GPU machine.
"""
import torch

aten = torch.ops.aten


def _t(x):
    if x is None:
        return "-"
    return "%s%s/%s" % (str(x.dtype).replace("torch.", ""), list(x.shape), list(x.stride()))


def _ints(v):
    return ",".join(str(int(i)) for i in v)


_BN_FWD = {aten.cudnn_batch_norm.default, aten.native_batch_norm.default}
_BN_BWD = {aten.cudnn_batch_norm_backward.default, aten.native_batch_norm_backward.default}


def _bn(func, args):
    if func in _BN_FWD:
        x, w, b, rm, rv, training = args[:6]
        return "bnf x=%s w=%s rs=%d t=%d" % (_t(x), str(w.dtype).replace("torch.", "") if w is not None else "-",
                                              rm is not None, bool(training))
    if func is aten.cudnn_batch_norm_backward.default:
        x, gy, w, rm = args[0], args[1], args[2], args[3]
        train = True
    else:
        gy, x, w, rm, train = args[0], args[1], args[2], args[3], args[7]
    return "bnb x=%s gy=%s w=%s rs=%d t=%d" % (_t(x), _t(gy), str(w.dtype).replace("torch.", "") if w is not None
                                                else "-", rm is not None, bool(train))


def key(func, args):
    if func in _BN_FWD or func in _BN_BWD:
        return _bn(func, args)
    if func is aten.convolution.default:
        x, w, b, stride, padding, dilation, transposed, output_padding, groups = args[:9]
        return "fwd x=%s w=%s b=%d s=%s p=%s d=%s t=%d op=%s g=%d" % (
            _t(x), _t(w), b is not None, _ints(stride), _ints(padding), _ints(dilation), bool(transposed),
            _ints(output_padding), int(groups))
    if func is aten.convolution_backward.default:
        (gy, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups,
         mask) = args[:11]
        return "bwd gy=%s x=%s w=%s b=%d s=%s p=%s d=%s t=%d op=%s g=%d m=%s" % (
            _t(gy), _t(x), _t(w), bias_sizes is not None, _ints(stride), _ints(padding), _ints(dilation),
            bool(transposed), _ints(output_padding), int(groups), "".join("1" if m else "0" for m in mask))
    return None
