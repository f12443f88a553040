"""What the words and numbers of a trace mean: collective ops, kernel families and nccl-tests factors
(:mod:`.collective_ops`), the trace fields' spellings (:mod:`.fields`), a data loader's spans
(:mod:`.loaders`), and time units (:mod:`.units`)."""
