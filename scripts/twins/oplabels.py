"""Label every allocation of a PyTorch run on a GPU with the aten op that made it (run on a GPU with PyTorch).

    with oplabels.OpLabels(key=None):
        ...

is a TorchDispatchMode that sets torch.cuda.memory._set_memory_metadata("K NAME") before each aten op reaches
its kernel and "" after it, so that a memory history recorded meanwhile (_record_memory_history) carries the op
in each event's "user_metadata": K counts the ops from 1, NAME is func.name(). key(func, args, kwargs) may
return a string to append (" | " KEY), which the conv table uses to name a convolution's problem. Dispatch modes
are thread-local state that the autograd engine carries to its device thread, so backward's ops are labelled too.

The mode runs each op as it would run without it (func(*args, **kwargs), the kernel PyTorch picks); a labelled
recording is compared with a plain one before its labels are trusted (predict_record.py --labelled).
"""
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class OpLabels(TorchDispatchMode):
    def __init__(self, key=None):
        super().__init__()
        self.n = 0
        self.key = key
        self.set = torch.cuda.memory._set_memory_metadata
        self.pid = os.getpid()  # a DataLoader worker forked under the mode labels nothing (no CUDA there)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if os.getpid() != self.pid:
            return func(*args, **kwargs)
        self.n += 1
        label = "%d %s" % (self.n, func.name())
        if self.key is not None:
            extra = self.key(func, args, kwargs)
            if extra:
                label += " | " + extra
        self.set(label)
        try:
            return func(*args, **kwargs)
        finally:
            self.set("")
