"""The heartbeat (issue 29, point 2): a progress line in the log every --heartbeat-s seconds and
at least every 10 % of an epoch, from both trainers, never a record."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scalesweep.contract.records import PREFIX
from scalesweep.train.common import heartbeat, trainer_args
from scalesweep.train.datasets import make_cifar, make_imagefolder

ROOT = Path(__file__).resolve().parents[1]
LINE = re.compile(r"\[heartbeat\] step (\d+) of (?:at most )?(\d+) \((\d+) %\), ([\d.]+) images/s so far, "
                  r"ETA (?:(\d+) h (\d+) min|(\d+) min (\d+) s|(\d+) s)")


class FakeTime:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def eta_seconds(match) -> int:
    hours, minutes_h, minutes, seconds_m, seconds = match.groups()[4:]
    if hours:
        return int(hours) * 3600 + int(minutes_h) * 60
    if minutes:
        return int(minutes) * 60 + int(seconds_m)
    return int(seconds)


def test_a_line_every_interval_and_every_tenth_of_an_epoch():
    clock, lines = FakeTime(), []
    beat = heartbeat.Heartbeat(lines.append, total_steps=400, steps_per_epoch=200, global_batch=8,
                               interval_s=30.0, now=clock)
    for step in range(1, 401):
        clock.now = step * 1.0  # 1 s a step: a tenth of the epoch (20 steps) comes before 30 s
        beat.tick(step)
    steps = [int(LINE.search(line).group(1)) for line in lines]
    assert steps == list(range(20, 401, 20))
    clock2, slow = FakeTime(), []
    beat = heartbeat.Heartbeat(slow.append, total_steps=100, steps_per_epoch=1000, global_batch=8,
                               interval_s=30.0, now=clock2)
    for step in range(1, 101):
        clock2.now = step * 10.0  # 10 s a step: the interval comes first, every 3 steps
        beat.tick(step)
    assert [int(LINE.search(line).group(1)) for line in slow][:3] == [3, 6, 9]
    eta = [eta_seconds(LINE.search(line)) for line in slow]
    assert eta[0] == (100 - 3) * 10 and all(later < earlier for earlier, later in zip(eta, eta[1:]))
    assert "0.8 images/s so far" in slow[0]


def test_no_more_than_a_line_a_second_for_short_epochs():
    clock, lines = FakeTime(), []
    beat = heartbeat.Heartbeat(lines.append, total_steps=100, steps_per_epoch=10, global_batch=8, now=clock)
    for step in range(1, 101):
        clock.now = step * 0.25  # 2.5 s epochs: a tenth is a step, a second is 4
        beat.tick(step)
    assert [int(LINE.search(line).group(1)) for line in lines] == list(range(4, 101, 4))


def test_the_planned_steps_of_both_protocols():
    epochs = {"protocol": "epochs", "epochs": 3, "images_per_epoch": 640, "global_batch": 64}
    assert heartbeat.planned_steps(epochs) == (30, 10, False)
    steps = {"protocol": "steps", "warmup_steps": 5, "timed_steps": 50, "max_timed_steps": None, "global_batch": 8}
    assert heartbeat.planned_steps(steps) == (55, 55, False)
    auto = {**steps, "timed_steps": "auto", "max_timed_steps": 500}
    assert heartbeat.planned_steps(auto) == (505, 505, True)
    assert "of at most 505" in heartbeat.heartbeat_line(10, 505, True, 1.0, 90.0)


@pytest.mark.parametrize("text", ["-1", "nan", "inf"])
def test_a_bad_interval_is_refused(text):
    parser = trainer_args.trainer_parser("t", ("m",), "")
    with pytest.raises(SystemExit):
        trainer_args.parse_args(parser, ["--model", "m", "--data", ".", "--heartbeat-s", text])


def trainer_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("RANK", "WORLD_SIZE")}
    return {**env, "OMP_NUM_THREADS": "1"}


def heartbeat_lines(stdout):
    lines = [line for line in stdout.splitlines() if "[heartbeat]" in line]
    assert all(PREFIX not in line for line in lines)  # a human line, never a record
    return [LINE.search(line) for line in lines]


@pytest.mark.slow
def test_a_minute_of_torch_training_shows_a_decreasing_eta(tmp_path):
    data = tmp_path / "ds"
    make_imagefolder.make_imagefolder(str(data), 4, 64, 2, size=64, seed=0)
    command = [sys.executable, str(ROOT / "scripts" / "train_torch.py"), "--model", "vit_tiny", "--data", str(data),
               "--resolution", "64", "--per-gpu-batch", "16", "--protocol", "steps", "--warmup-steps", "5",
               "--timed-steps", "400", "--heartbeat-s", "3"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=400, env=trainer_env(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    beats = heartbeat_lines(run.stdout + run.stderr)
    assert len(beats) >= 8 and all(beats)
    assert {int(beat.group(2)) for beat in beats} == {405}
    steps = [int(beat.group(1)) for beat in beats]
    assert steps == sorted(steps) and max(b - a for a, b in zip([0] + steps, steps)) <= 41  # 10 % of 405
    eta = [eta_seconds(beat) for beat in beats]
    # The ETA falls as the run goes: a busy neighbour may make one estimate rise a little, never the trend.
    falls = sum(later < earlier for earlier, later in zip(eta, eta[1:]))
    assert eta[0] > eta[-1] and falls >= 0.7 * (len(eta) - 1), eta


@pytest.mark.slow
def test_the_tensorflow_trainer_beats_too(tmp_path):
    data = make_cifar.generate(tmp_path / "data", train_images=256, test_images=10, seed=0).parent
    command = [sys.executable, str(ROOT / "scripts" / "train_tf.py"), "--data", str(data), "--model", "cnn_small",
               "--resolution", "32", "--per-gpu-batch", "16", "--epochs", "2", "--heartbeat-s", "0.000001"]
    run = subprocess.run(command, capture_output=True, text=True, timeout=400, env=trainer_env(), cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    beats = heartbeat_lines(run.stdout + run.stderr)
    # An interval shorter than any step: a line after every step of the 2 x 16.
    assert [int(beat.group(1)) for beat in beats] == list(range(1, 33))
    assert {int(beat.group(2)) for beat in beats} == {32}
