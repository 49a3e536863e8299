"""The user's frames: the innermost Python frames outside torch, this package and runpy."""
import os
import sys

import torch

SKIP = (os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
         os.path.dirname(os.path.abspath(__file__)) + os.sep,
         os.path.dirname(os.path.abspath(os.__file__)) + os.sep,  # the standard library (runpy, contextlib)
         "<frozen ")


def user_frames(limit=3, frame=None):
    """Up to `limit` user frames, innermost first, as snapshot frames ({filename, line, name}), from frame (default:
    the caller's)."""
    out = []
    f = frame if frame is not None else sys._getframe(1)
    while f is not None and len(out) < limit:
        name = f.f_code.co_filename
        if not name.startswith(SKIP):
            out.append({"filename": name, "line": f.f_lineno, "name": f.f_code.co_name})
        f = f.f_back
    return out
