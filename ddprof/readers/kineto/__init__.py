"""PyTorch profiler (Kineto) traces: :mod:`.reader` (recognition, identity), :mod:`.decode` (a file -> a frame
of its events, streamed: :mod:`.stream`, :mod:`.structs`, :mod:`.events`, :mod:`.depth`) and :mod:`.build`
(the frames -> the store's event table: :mod:`.categories`, :mod:`.comm_rows`, :mod:`.link`, :mod:`.steps`)."""
