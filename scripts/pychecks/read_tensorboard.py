"""Reads a directory of TensorBoard event files with TensorBoard's own
reader and prints its scalars as JSON.

Usage: read_tensorboard.py LOGDIR

LOGDIR is a directory holding event files (a run's tensorboard/). The
output is one JSON object:

  {"tensorboard": VERSION, "files": [NAME, ...],
   "scalars": {TAG: [[STEP, VALUE], ...], ...}}

with each tag's events in the order the reader delivers them (every
event, duplicates included: size_guidance keeps all scalars), and each
value as the float32 TensorBoard holds, written so that it reads back to
the same float32. It runs in the environment scripts/pychecks.sh installs
(no TensorFlow: TensorBoard falls back to its own stub).
"""

import json
import os
import struct
import sys

import tensorboard
from tensorboard.backend.event_processing import event_accumulator


def main(argv):
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: read_tensorboard.py LOGDIR (a directory of event files)", file=sys.stderr)
        return 2
    logdir = argv[1]
    acc = event_accumulator.EventAccumulator(
        logdir, size_guidance={event_accumulator.SCALARS: 0}
    )
    acc.Reload()
    scalars = {}
    for tag in acc.Tags()[event_accumulator.SCALARS]:
        scalars[tag] = [[e.step, as_float32(e.value)] for e in acc.Scalars(tag)]
    out = {
        "tensorboard": tensorboard.__version__,
        "files": sorted(f for f in os.listdir(logdir) if "tfevents" in f),
        "scalars": scalars,
    }
    json.dump(out, sys.stdout, sort_keys=True)
    sys.stdout.write("\n")
    return 0


def as_float32(v):
    """The float32 nearest v (TensorBoard's stub widens simple_value to a
    Python float), which repr writes so that it reads back exactly."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
