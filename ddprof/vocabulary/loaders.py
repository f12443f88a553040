"""What a data loader's spans are called in a trace: the host time a training step spends drawing its batch.

PyTorch's profiler records each batch drawn from a ``torch.utils.data.DataLoader`` as an op named
``enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`` (``_MultiProcessingDataLoaderIter`` with
workers); PyTorch Lightning annotates ``[_TrainingEpochLoop].train_dataloader_next``; other loops name
their own spans ``data_loader``. One pattern, case-insensitive, for every analysis that looks for them; and
the prefix of PyTorch's own, for a filter over every row of a large store (``analyze`` reading a GPU rank's
host rows: a regular expression over 51 M rows cost 14 % more CPU on 1,024 generated ranks). Ingest, which
reads every row once anyway, lists each rank's distinct loader span names in the manifest (``loader_names``),
so that such a filter keeps the others by name.
"""

from __future__ import annotations

import re

#: A data loader's span, by name (a Polars or Python regular expression).
DATA_LOADER_PATTERN = r"(?i)dataloader|data_loader"
DATA_LOADER = re.compile(DATA_LOADER_PATTERN)
#: How PyTorch's own DataLoader spans begin: a prefix test costs a tenth of the pattern on every row of a large
#: scan (a string's first bytes are stored inline), so a reader that must look at every row keeps these.
DATA_LOADER_PREFIX = "enumerate(DataLoader)"
