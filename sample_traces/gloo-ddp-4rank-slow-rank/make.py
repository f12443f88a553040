"""Re-create this sample: 4-rank DDP on CPU (gloo), rank 2 sleeping 100 ms before every forward.

    python sample_traces/gloo-ddp-4rank-slow-rank/make.py      (needs torch; about 15 s)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the test jobs are not installed
from jobs import capture_sample  # noqa: E402

JOB = ["ddp", "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2", "--bucket-cap-mb", "0.5",
       "--slow-rank", "2", "--slow-ms", "100"]

if __name__ == "__main__":
    capture_sample(Path(__file__).resolve().parent, JOB, world_size=4)
