"""The decoding under any reader of Kineto traces, as the benchmarks' floors time it: a trace's text cut into
runs of whole events (:func:`ddprof.readers.kineto.stream.split`), each decoded by ingest's own typed decoders,
strict then lenient, and nothing kept.

``DECODE`` is code, not a function: the benchmarks run it in a fresh process (``python -c``), where it defines
``decode(text)`` for one run of events.
"""

DECODE = """
import msgspec
from ddprof.readers.kineto.stream import split
from ddprof.readers.kineto.structs import LENIENT_RUN, STRICT_RUN
_strict, _lenient = msgspec.json.Decoder(STRICT_RUN), msgspec.json.Decoder(LENIENT_RUN)
def decode(text):
    try:
        _strict.decode(text)
    except msgspec.ValidationError:
        _lenient.decode(text)
"""
