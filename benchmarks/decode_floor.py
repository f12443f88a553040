"""The decoding under any reader of Kineto traces, as the benchmarks' floors time it: a trace's text cut into
runs of whole events (:func:`ddprof.readers.kineto.stream.split`), each read by ingest's compiled scanner where
it is built and takes the run (``ddprof/readers/kineto/_scan.c``: no Python object per event), else decoded by
ingest's typed decoders, strict then lenient; nothing kept.

``DECODE`` is code, not a function: the benchmarks run it in a fresh process (``python -c``), where it defines
``decode(text)`` for one run of events.
"""

DECODE = """
import msgspec
from ddprof.readers.kineto.stream import split
from ddprof.readers.kineto.structs import LENIENT_RUN, STRICT_RUN
_strict, _lenient = msgspec.json.Decoder(STRICT_RUN), msgspec.json.Decoder(LENIENT_RUN)
try:
    from ddprof.readers.kineto._scan import Scanner
    _scanner = Scanner(9.2e15, 86400e6)
except ImportError:
    _scanner = None
_none = bytes(1 << 20)  # no name a marker's, no instant's category with a kind: nothing set aside
def decode(text):
    if _scanner is not None and _scanner.scan(text, _none, _none) is not None:
        return
    try:
        _strict.decode(text)
    except msgspec.ValidationError:
        _lenient.decode(text)
"""
