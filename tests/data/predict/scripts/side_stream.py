"""A copy made on a side stream, as prefetching loaders and FSDP do: torch.cuda.Stream, stream(), wait_stream,
record_event, and a storage resized to nothing and back."""
import torch

s = torch.cuda.Stream()
x = torch.empty(1 << 20, device="cuda")
with torch.cuda.stream(s):
    assert torch.cuda.current_stream() == s
    y = torch.empty(1 << 20, device="cuda")
    event = s.record_event()
torch.cuda.current_stream().wait_event(event)
s.wait_stream(torch.cuda.current_stream())
y.untyped_storage().resize_(0)
y.untyped_storage().resize_(2 << 20)
print(torch.cuda.current_stream() == torch.cuda.default_stream(), y.untyped_storage().nbytes())
