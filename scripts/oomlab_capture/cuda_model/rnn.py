"""GRUCell and LSTMCell: CUDA's fused cell kernels, which meta does not take.

aten/src/ATen/native/RNN.cpp (PyTorch 2.11) GRUCell/LSTMCell::operator(): for a CUDA input the gates are
at::matmul(input, w_ih.t()) and at::matmul(hx, w_hh.t()) (no bias), then one fused kernel,
_thnn_fused_gru_cell / _thnn_fused_lstm_cell, which adds the biases and keeps a workspace for backward; any
other device (meta included) runs the unfused chunk/sigmoid/tanh formula, which allocates and saves other
tensors. The model routes the cells through the fused ops. _thnn_fused_lstm_cell has a meta function;
_thnn_fused_gru_cell and its backward have none, so they get one here, allocating what
aten/src/ATen/native/cuda/RNN.cu allocates: forward workspace [B, 5H] (GRU_WORKSPACE_MULTIPLIER), then
hy = empty_like(hx) (_thnn_fused_gru_cell_cuda; ALLOC_ORDER gives the capture that order, and the H100 recording
of tests/data/predict/scripts/gru_tbptt.py shows it); backward grad_input_gates [B, 3H], grad_hidden_gates [B, 3H], grad_hx, then with
biases grad_input_gates.sum(0) and grad_hidden_gates.sum(0) (the recording agrees).

nn.LSTM / nn.GRU / nn.RNN (torch._VF.lstm, gru, rnn_tanh, rnn_relu) are not modelled: on CUDA they run through
cuDNN when aten/src/ATen/native/RNN.cpp's at::cudnn_is_acceptable holds (cuDNN enabled, float32/float64/float16
input; aten/src/ATen/native/TensorProperties.cpp), as _cudnn_rnn (aten/src/ATen/native/cudnn/RNN.cpp): the
module's weights flattened into one buffer at .to(device) (torch/nn/modules/rnn.py flatten_parameters,
_cudnn_rnn_flatten_weight), the whole sequence in one call with a workspace and a reserve kept for backward whose
sizes are cuDNN's (cudnnGetRNNTempSpaceSizes), a dropout state buffer (cudnnDropoutGetStatesSize) when dropout > 0.
On meta the same call runs RNN.cpp's per-step cell loop, whose allocations differ; rnn_module counts it in the
report's "not modelled" lines so the prediction says so.
"""
import torch

aten = torch.ops.aten
SOURCE = "aten/src/ATen/native/RNN.cpp GRUCell/LSTMCell (is_cuda fused path); native/cuda/RNN.cu"
_lib = None

# op -> the order (indices into its outputs) in which its CUDA kernel allocates them (recorder.ALLOC_ORDER)
ALLOC_ORDER = {aten._thnn_fused_gru_cell.default: (1, 0)}


def _register():
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")

    def gru_fwd(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
        hy = torch.empty_like(hx, memory_format=torch.contiguous_format)
        ws = torch.empty((hx.size(0), hx.size(1) * 5), dtype=input_gates.dtype, device=input_gates.device)
        return hy, ws

    def gru_bwd(grad_hy, workspace, has_bias):
        h = workspace.size(1) // 5
        gi = torch.empty((workspace.size(0), 3 * h), dtype=workspace.dtype, device=workspace.device)
        gh = torch.empty((workspace.size(0), 3 * h), dtype=workspace.dtype, device=workspace.device)
        ghx = torch.empty_like(grad_hy, memory_format=torch.contiguous_format)
        if has_bias:
            return gi, gh, ghx, gi.sum(0), gh.sum(0)
        return gi, gh, ghx, None, None

    _lib.impl("_thnn_fused_gru_cell", gru_fwd, "Meta")
    _lib.impl("_thnn_fused_gru_cell_backward", gru_bwd, "Meta")


def gru_cell(cap, orig, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    if not (isinstance(input, torch.Tensor) and input.is_meta):
        return orig(input, hx, w_ih, w_hh, b_ih, b_hh)
    _register()
    cap.count_modelled("GRUCell fused kernel", 0, SOURCE)
    ig = torch.matmul(input, w_ih.t())
    hg = torch.matmul(hx, w_hh.t())
    return aten._thnn_fused_gru_cell(ig, hg, hx, b_ih, b_hh)[0]


def lstm_cell(cap, orig, input, hx, w_ih, w_hh, b_ih=None, b_hh=None):
    if not (isinstance(input, torch.Tensor) and input.is_meta):
        return orig(input, hx, w_ih, w_hh, b_ih, b_hh)
    cap.count_modelled("LSTMCell fused kernel", 0, SOURCE)
    ig = torch.matmul(input, w_ih.t())
    hg = torch.matmul(hx[0], w_hh.t())
    r = aten._thnn_fused_lstm_cell(ig, hg, hx[1], b_ih, b_hh)
    return r[0], r[1]


SOURCE_CUDNN_RNN = ("aten/src/ATen/native/cudnn/RNN.cpp _cudnn_rnn/_cudnn_rnn_backward (flattened weights, "
                    "cuDNN's workspace and reserve); torch/nn/modules/rnn.py flatten_parameters")
_CUDNN_DTYPES = (torch.float32, torch.float64, torch.float16)


def rnn_module(cap, orig, *args):
    """torch._VF.lstm/gru/rnn_tanh/rnn_relu: run as meta runs it; counted as not modelled where CUDA would take
    cuDNN (at::cudnn_is_acceptable on the input), and as the unfused cell loop otherwise (CUDA's cells are fused)."""
    x = args[0]
    if isinstance(x, torch.Tensor) and x.is_meta and x.numel() > 0:
        if torch.backends.cudnn.enabled and x.dtype in _CUDNN_DTYPES:
            cap.count_unmodelled("nn.LSTM/GRU/RNN through cuDNN (_cudnn_rnn)", SOURCE_CUDNN_RNN)
        else:
            cap.count_unmodelled("nn.LSTM/GRU/RNN without cuDNN (fused cells per step)", SOURCE)
    return orig(*args)
