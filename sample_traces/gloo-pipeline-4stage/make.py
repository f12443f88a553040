"""Re-create this sample: a 4-stage GPipe pipeline on CPU (gloo send/recv), 4 micro-batches of 8.

    python sample_traces/gloo-pipeline-4stage/make.py      (needs torch; about 15 s)
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the test jobs are not installed
from jobs import capture_sample  # noqa: E402

JOB = ["pipeline", "--steps", "5", "--wait", "1", "--warmup", "1", "--active", "2", "--microbatches", "4",
       "--batch", "8"]

if __name__ == "__main__":
    capture_sample(Path(__file__).resolve().parent, JOB, world_size=4)
