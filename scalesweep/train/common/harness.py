"""The trainers' framework-neutral harness: one run's life cycle around a framework backend.

The backends (scalesweep/train/tf_backend/, scalesweep/train/torch_backend/) supply only what
their framework knows: devices and the distributed world, the data, the model, one training step,
one probe of the maximum-batch search, how out of memory shows and how memory is given back,
provenance. This module does the rest, the same way for all: the records in contract order
(runlog.RunLog: header, epoch..., summary), the out-of-memory policy, the maximum-batch search, the
epochs and steps protocols, the human lines and the exit status. The step clocks are stepclock.py,
the options every trainer shares trainer_args.py (both beside this module). docs/trainers.md is
the checklist for a third backend.

Standard library only: it runs inside the TensorFlow and PyTorch containers alike.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
import traceback

from scalesweep.contract import run_env
from scalesweep.train.common import energy, heartbeat, measure, runlog, stepparts
from scalesweep.train.common.measure import AUTO_TIMED_STEPS, PROBE_STEPS

# Any failure but out of memory: Snakemake marks the job failed and a rerun repeats it.
EXIT_FAILED = 1


# ---------------------------------------------------------------- what a backend supplies


class Backend:
    """One framework's side of a run (docs/trainers.md). The harness calls, in this order:
    setup() once; per attempt header() then build(); probe() per try of the maximum-batch search;
    after_training() once training is done; teardown() last, whatever happened.

    build() returns the attempt: an object with `clock` (a StepClock its steps are timed on),
    `global_batch`, `header_updates` (header keys only known once the model is built, {} if none),
    and fit_epochs(meter, epochs) / fit_steps(meter, windows), which train, timing every step on
    the clock (and marking clock.data_ready() once the step's batch is on the device) and giving
    each window's loss and accuracy to meter.finish(). Its breakdown_probes() returns what the
    step breakdown needs beyond the timed steps: {"compute": [seconds of probe steps without
    gradient synchronisation], "compute_paired": [seconds after the data wait of the step each probe
    step followed], "allreduce": [seconds of one bucket-sized all-reduce], "ranks",
    "gradient_bytes"} (stepparts.py), or None where the backend does not measure it.
    """

    framework = None
    # The energy counters of this process's devices (energy.py), opened by the harness
    # after setup() from energy_devices().
    energy_counters = energy.NoCounters("the run ended before its devices were set up")

    def info(self, message: str) -> None:
        """A human line (the primary process only)."""
        raise NotImplementedError

    def emit(self, record: dict) -> None:
        """A `:::SCALESWEEP` record (the primary process only)."""
        raise NotImplementedError

    def setup(self, args: argparse.Namespace) -> None:
        """Devices, the distributed world and the training data: what every attempt shares."""
        raise NotImplementedError

    def header(self, per_gpu_batch: int) -> dict:
        """The header record of an attempt at `per_gpu_batch`: header_record() with the world,
        data and own keys this backend set up."""
        raise NotImplementedError

    def build(self, per_gpu_batch: int, attempt: int):
        """Data pipeline and model of one training attempt (1-based `attempt`)."""
        raise NotImplementedError

    def probe(self, per_gpu_batch: int, attempt: int, steps: int) -> None:
        """Train `steps` steps at `per_gpu_batch`; raises the framework's out-of-memory error."""
        raise NotImplementedError

    def is_out_of_memory(self, error: BaseException) -> bool:
        raise NotImplementedError

    def error_text(self, error: BaseException) -> str:
        """`Type: message`, for the one-line reasons of the records."""
        return f"{type(error).__name__}: {error}"

    def after_training(self, attempt, log: runlog.RunLog) -> None:
        """Work after the time to solution (validation); nothing by default."""

    def release_memory(self) -> None:
        """Give a failed attempt's or a finished probe's memory back; nothing by default."""

    def peak_memory_gb(self) -> float | None:
        """Peak device memory of the attempt in GiB; None where the framework cannot tell."""
        return None

    def teardown(self) -> None:
        """Leave the distributed world; nothing by default."""

    def tracer(self, attempt, out_dir: str, first: int, steps: int, ranks: str):
        """A profiler over steps first+1 .. first+steps of `attempt` writing into `out_dir` (an
        object with step(steps_done)), or None on a process `ranks` ("all", or "0,1") leaves out."""
        raise NotImplementedError(f"{self.framework}: no profiler trace")

    def energy_devices(self):
        """(on_gpu, local indices of the devices this process drives), whose energy counters the
        harness reads (energy.py); None where the backend reads none."""
        return None

    def energy_per_rank(self, joules: list) -> list:
        """Every rank's joules, from this process's own (one per device it drives): a collective
        in a multi-process backend, called outside every window. One process: its own list."""
        return list(joules)


# ---------------------------------------------------------------- the protocols


def step_windows(args: argparse.Namespace, max_steps=None) -> list[tuple]:
    """The steps protocol's windows, (epoch record number, phase, measure.TimedWindow): the run's
    --warmup-steps steps, then the timed window (a fixed count, or the adaptive rule capped at
    `max_steps`, the header's bounded cap; default --max-timed-steps)."""
    max_steps = max_steps or args.max_timed_steps
    return [(1, "warmup", measure.TimedWindow(args.warmup_steps)),
            (2, "timed", measure.TimedWindow(args.timed_steps, args.target_ci_pct, max_steps))]


class WindowMeter:
    """Turns a window of timed steps (an epoch, or a window of the steps protocol) into its
    `epoch` record, writes it to the run's log and prints its human line.

    A window runs from `start(at)` (None: the begin of its first step) to `finish(ended=...)`
    (None: the device-synchronized end of its last step); the steps among the run's first
    `warmup_steps` are left out of its step statistics.
    """

    def __init__(self, log: runlog.RunLog, clock: StepClock, global_batch: int, warmup_steps: int, info,
                 counters=None):
        self.log, self.clock, self.info = log, clock, info
        self.global_batch, self.warmup_steps = global_batch, warmup_steps
        self.first_step, self.started = 0, None
        self.counters = counters or energy.NoCounters("no energy counters given to the window")
        self.energy_start = self.energy_end = None

    def start(self, at: float | None = None) -> None:
        # A counter read is a driver call without device synchronisation, but it takes time (3.5 ms
        # on an H100): the window starts after it, so no read is inside the window's seconds.
        self.energy_start, self.energy_end = self.counters.read(), None
        self.first_step = self.clock.finished
        self.started = None if at is None else at + self.energy_start.cost_s

    def energy_used(self) -> tuple:
        """(joules per device of this process since start(), why unknown). The end is read at
        the first call: a backend calls it right after its window's end, before any collective."""
        if self.energy_end is None:
            self.energy_end = self.counters.read()
        devices = len(self.energy_start.millijoules or ()) or 1
        return energy.joules_between(self.energy_start, self.energy_end, devices)

    def durations(self) -> list[float]:
        """The durations of the window's steps so far (what a TimedWindow decides on)."""
        return self.clock.durations[self.first_step:]

    def finish(self, number: int, loss=None, accuracy=None, *, phase=None, window=None, ended=None,
               energy_by_rank=None, excluded_s: float = 0.0) -> dict:
        """The window's epoch record (1-based `number`); `window` (the TimedWindow) adds how a
        timed window ended. `energy_by_rank`: every rank's joules of the window (a multi-process
        backend gathers them with its own reduction); None: this process's devices'.
        `excluded_s`: seconds of the breakdown's probe steps between the window's steps, taken
        out of its seconds and, in proportion, out of its energy (the probe steps run the same
        work at the same power): throughput and energy per image see training steps only."""
        own, reason = self.energy_used()
        steps = self.clock.finished - self.first_step
        timing = measure.window_timing(self.clock.begins, self.clock.ends, self.first_step, steps,
                                      self.warmup_steps, self.started, ended)
        trained = timing["seconds"] - excluded_s
        record = runlog.epoch_record(
            number, steps * self.global_batch, trained, loss, accuracy,
            step_stats={key: timing[key] for key in runlog.STEP_KEYS}, phase=phase,
            window=window.record_keys() if phase == "timed" and window else None,
        )
        joules = energy.per_rank_values(own if energy_by_rank is None else energy_by_rank)
        share = trained / timing["seconds"] if excluded_s > 0 and timing["seconds"] > 0 else 1.0
        record.update(energy.energy_keys([None if value is None else value * share for value in joules],
                                         reason, self.counters.source))
        record["energy_read_s"] = self.energy_start.cost_s + self.energy_end.cost_s
        if phase is None:  # a whole epoch; a steps-protocol window has no epoch boundary
            record["epoch_overhead_s"] = measure.epoch_overhead(trained, self.durations())
        waits = self.clock.data_waits[self.first_step:]
        self.log.epoch(record, measure.timed_durations(self.durations(), self.first_step, self.warmup_steps),
                       measure.timed_durations(waits, self.first_step, self.warmup_steps))
        self.info(window_line(record) if phase else epoch_line(record))
        return record


# ---------------------------------------------------------------- the run's life cycle


def run(backend: Backend, args: argparse.Namespace, started: float | None = None) -> int:
    """Set up, train (or search the maximum batch), report; always close the log with a summary.
    Returns the exit status: 0 when the run finished or ran out of memory (a measured outcome),
    EXIT_FAILED on any other failure. `started`: time.perf_counter() at the trainer's start, for
    the summary's wall_time_s."""
    start = time.perf_counter()  # time to solution: data loading and model build included
    log = runlog.RunLog(backend.emit, started=started)
    # SLURM's time limit and scancel send SIGTERM: end with a `failed` summary saying so.
    runlog.raise_on_sigterm()
    try:
        backend.setup(args)
        backend.energy_counters = open_energy_counters(backend)
        run_energy = backend.energy_counters.read()
        if args.find_max_batch:
            search_and_report(backend, args, log, start)
        else:
            train_and_report(backend, args, log, start, run_energy)
        return 0
    except BaseException as error:
        status = close_early(backend, args, log, error, start)
        if not isinstance(error, Exception):  # KeyboardInterrupt, SystemExit: theirs to end
            raise
        return status
    finally:
        backend.energy_counters.close()
        backend.teardown()


def open_energy_counters(backend: Backend):
    """The energy counters of the devices the backend's process drives (energy.py)."""
    devices = backend.energy_devices()
    if devices is None:
        return energy.NoCounters(f"the {backend.framework} backend reads no energy counter")
    on_gpu, local_indices = devices
    return energy.open_counters(on_gpu, local_indices)


def run_energy_keys(backend: Backend, started: energy.Reading) -> dict:
    """The summary's energy of the whole run, from the end of setup to now, summed over ranks."""
    devices = len(started.millijoules or ()) or 1
    own, reason = energy.joules_between(started, backend.energy_counters.read(), devices)
    return energy.energy_keys(backend.energy_per_rank(own), reason, backend.energy_counters.source, "run_")


def train_and_report(backend: Backend, args, log: runlog.RunLog, start: float,
                     run_energy: energy.Reading | None = None) -> None:
    attempt = train_with_oom_policy(backend, args, log)
    # Time to solution ends with the last epoch: validation is reported beside it, not inside it,
    # and so are the breakdown's probes (outside every window, too).
    total_time_s = time_to_solution(args, start)
    log.measured.update(step_breakdown(attempt, log, backend.info))
    backend.after_training(attempt, log)
    if run_energy is not None:
        log.measured.update(run_energy_keys(backend, run_energy))
    summary = log.close("ok", total_time_s, memory_gb=peak_memory(backend))
    finish_lines(backend.info, summary)


def step_breakdown(attempt, log: runlog.RunLog, info) -> dict:
    """The summary's breakdown keys (stepparts.py) from the steady steps and the
    attempt's probes; {} where the attempt does not measure them. Prints the parts."""
    began = time.perf_counter()
    probes = attempt.breakdown_probes() if hasattr(attempt, "breakdown_probes") else None
    if probes is None:
        return {}
    # The probe steps between the timed steps (kept out of the windows' seconds) count too.
    probe_s = time.perf_counter() - began + probes.get("interleaved_s", 0.0)
    seconds, steps = log.steady_window()
    parts = stepparts.step_parts(seconds, steps, log.steady_durations, log.steady_waits, probes["compute"],
                                 probes["ranks"], probes.get("sync_waits"), probes.get("compute_paired"))
    parts.update(stepparts.allreduce_keys(probes["gradient_bytes"], probes["allreduce"], probes["ranks"], parts))
    info(breakdown_line(parts))
    return {**parts, "probe_s": probe_s}


def breakdown_line(parts: dict) -> str:
    """The human line of the step breakdown: every part, `other` included."""
    if parts.get("breakdown_step_s") is None:
        return "step breakdown: not measured (too few steady steps)"
    ms = {key: 1000.0 * parts[key] for key in stepparts.PART_KEYS}
    line = (f"step breakdown: {ms['breakdown_step_s']:.2f} ms per step = data {ms['data_wait_s']:.2f} + compute "
            f"{ms['compute_s']:.2f} + sync wait {ms['sync_wait_s']:.2f} + sync comm {ms['sync_comm_s']:.2f} + other "
            f"{ms['other_s']:.2f} ms")
    if parts.get("allreduce_s") is not None:
        line += (f"; all-reduce {1000.0 * parts['allreduce_s']:.2f} ms for {parts['allreduce_bytes'] / 1e6:.1f} MB "
                 f"(busbw {parts['busbw_gb_s']:.2f} GB/s), overlap {parts['overlap_pct']:.0f} %")
    return line


def close_early(backend: Backend, args, log: runlog.RunLog, error: BaseException, start: float) -> int:
    """The summary of a run that stopped early, with the epochs it finished; the exit status.
    Called inside the `except` block: a failure's traceback goes to stderr (every rank's own)."""
    if backend.is_out_of_memory(error):
        status, reason = "oom", oom_reason(args, log, backend.error_text(error))
    else:
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
        status, reason = "failed", backend.error_text(error)
    log.close(status, time_to_solution(args, start), reason, peak_memory(backend))
    outcome = "ran out of memory" if status == "oom" else "failed"
    backend.info(f"Training {outcome}: {runlog.one_line(reason)}")
    return 0 if status == "oom" else EXIT_FAILED


def oom_reason(args, log: runlog.RunLog, error_text: str) -> str:
    batch = log.header["per_gpu_batch"] if log.header else args.per_gpu_batch
    halvings = f" after {log.oom_retries} halving(s) from {args.per_gpu_batch}" if log.oom_retries else ""
    return f"out of memory at per-GPU batch {batch}{halvings} ({args.resolution} px, {args.precision}): {error_text}"


def time_to_solution(args, start: float) -> float | None:
    """Seconds since the run started; None under the steps protocol, which measures throughput."""
    if args.protocol == "steps" and not args.find_max_batch:
        return None
    return time.perf_counter() - start


def peak_memory(backend: Backend) -> float | None:
    # The summary must get out even when the failure left the device unusable.
    try:
        return backend.peak_memory_gb()
    except Exception:  # noqa: BLE001 - any error here would hide the run's own failure
        return None


# ---------------------------------------------------------------- out-of-memory policy


def train_attempt(backend: Backend, args, log: runlog.RunLog, per_gpu_batch: int, number: int):
    """One training run at `per_gpu_batch` under the asked protocol; its records go to `log`."""
    # Pending before the model build: an out-of-memory error there still gets its header.
    log.expect(backend.header(per_gpu_batch))
    attempt = backend.build(per_gpu_batch, number)
    log.header.update(attempt.header_updates)
    if args.oom_policy == "fail":
        log.open()
    attempt.clock.after_end = step_hooks(heartbeat_hook(log.header, args.heartbeat_s, backend.info),
                                         trace_hook(backend, attempt, args))
    meter = WindowMeter(log, attempt.clock, attempt.global_batch, args.warmup_steps, backend.info,
                        backend.energy_counters)
    if args.protocol == "steps":
        attempt.fit_steps(meter, step_windows(args, log.header.get("max_timed_steps")))
    else:
        attempt.fit_epochs(meter, args.epochs)
    return attempt


def heartbeat_hook(header: dict, interval_s: float, say):
    """The attempt's progress lines (heartbeat.py), or None with --heartbeat-s 0."""
    if interval_s <= 0:
        return None
    total, per_epoch, capped = heartbeat.planned_steps(header)
    return heartbeat.Heartbeat(say, total, per_epoch, header["global_batch"], capped, interval_s).tick


def trace_hook(backend: Backend, attempt, args):
    """With --trace-dir, the backend's profiler over the timed window's steps on this process
    (None on a rank --trace-ranks leaves out)."""
    if not args.trace_dir:
        return None
    tracer = backend.tracer(attempt, args.trace_dir, args.warmup_steps, args.timed_steps, args.trace_ranks)
    return tracer.step if tracer is not None else None


def traces_rank(ranks: str, rank: int) -> bool:
    """Whether --trace-ranks ('all', or '0,1') names `rank`."""
    return ranks.strip() == "all" or str(rank) in {part.strip() for part in ranks.split(",")}


def step_hooks(*hooks):
    """One `after_end` for a step clock calling each of `hooks` (None: none) in order."""
    hooks = [hook for hook in hooks if hook is not None]
    if len(hooks) <= 1:
        return hooks[0] if hooks else None

    def after_end(steps_done: int) -> None:
        for hook in hooks:
            hook(steps_done)
    return after_end


def train_with_oom_policy(backend: Backend, args, log: runlog.RunLog):
    """Train; with --oom-policy halve, an attempt that runs out of memory before its first epoch
    record is retried at half the per-GPU batch, down to 1. Returns the attempt that trained."""
    batch = args.per_gpu_batch
    for number in itertools.count(1):
        try:
            return train_attempt(backend, args, log, batch, number)
        except Exception as error:
            if not (backend.is_out_of_memory(error) and may_retry(args, log, batch)):
                raise
            reason = runlog.one_line(backend.error_text(error))
        # Retried outside the except block: the traceback, and the failed model with it, is gone.
        backend.release_memory()
        log.emit({"record": "oom_retry", "per_gpu_batch": batch, "next_per_gpu_batch": batch // 2,
                  "reason": reason})
        backend.info(f"Out of memory at per-GPU batch {batch}; retrying with {batch // 2} (--oom-policy halve)")
        log.oom_retries += 1
        batch //= 2


def may_retry(args, log: runlog.RunLog, batch: int) -> bool:
    return args.oom_policy == "halve" and batch > 1 and not log.header_emitted


# ---------------------------------------------------------------- maximum-batch search


def probe_fits(backend: Backend, args, per_gpu_batch: int, attempt: int) -> bool:
    """Whether PROBE_STEPS training steps at `per_gpu_batch` run without running out of memory."""
    try:
        backend.probe(per_gpu_batch, attempt, PROBE_STEPS)
        note = "fits"
    except Exception as error:
        if not backend.is_out_of_memory(error):
            raise
        note = f"runs out of memory ({runlog.one_line(backend.error_text(error))})"
    backend.release_memory()
    backend.info(f"max batch: per-GPU batch {per_gpu_batch} {note}")
    return note == "fits"


def find_max_batch(backend: Backend, args, log: runlog.RunLog) -> dict:
    """Search the largest per-GPU batch that trains; emits the `max_batch` record."""
    log.expect(backend.header(args.per_gpu_batch))
    log.open()
    attempts = itertools.count(1)
    result = measure.search_max_batch(
        lambda batch: probe_fits(backend, args, batch, next(attempts)), args.per_gpu_batch, args.max_batch_limit)
    log.emit({"record": "max_batch", **result, "max_batch_limit": args.max_batch_limit,
              "probe_steps": PROBE_STEPS, "resolution": args.resolution, "precision": args.precision,
              "compile": log.header["compile"]})
    limit_note = f" (the --max-batch-limit {args.max_batch_limit} was reached)" if result["limit_reached"] else ""
    backend.info(f"max batch: largest per-GPU batch that trains: {result['per_gpu_batch']}{limit_note}")
    return result


def search_and_report(backend: Backend, args, log: runlog.RunLog, start: float) -> None:
    status, reason = "ok", None
    if find_max_batch(backend, args, log)["per_gpu_batch"] is None:
        status = "oom"
        reason = f"no per-GPU batch fits, not even 1 ({args.resolution} px, {args.precision})"
    log.close(status, time_to_solution(args, start), reason, peak_memory(backend))


# ---------------------------------------------------------------- header keys and human lines


def scaled_learning_rate(base_lr: float, world_size: int) -> float:
    """The reference's linear scaling: base_lr x the replicas (the CPU baseline counts as one)."""
    return base_lr * max(1, world_size)


def header_record(args, framework: str, per_gpu_batch: int, world_size: int, steps_per_epoch: int,
                  train_images: int, own: dict) -> dict:
    """The header record of an attempt at `per_gpu_batch` (docs/records.md): the keys every trainer
    writes from its options and world, then `own`, what only the backend knows (device kind,
    nodes, the compile it got, versions, devices, provenance)."""
    global_batch = per_gpu_batch * world_size
    return {
        "record": "header",
        "framework": framework,
        "model": args.model,
        "dataset": args.dataset_name or os.path.basename(os.path.normpath(args.data)),
        "resolution": args.resolution,
        "gpus": args.gpus,
        "world_size": world_size,
        "per_gpu_batch": per_gpu_batch,
        "global_batch": global_batch,
        "requested_per_gpu_batch": args.per_gpu_batch,
        "oom_policy": args.oom_policy,
        "learning_rate": scaled_learning_rate(args.base_lr, world_size),
        "precision": args.precision,
        "compile": args.compile,
        **protocol_fields(args, global_batch, steps_per_epoch, train_images),
        **own_env(args),
        **own,
    }


def own_env(args) -> dict:
    """The header's `env`, only for a run started with variables of its own: a run without
    them keeps the header (and settings_hash) it had before the key existed."""
    return {"env": run_env.seen(args.env_names, os.environ)} if args.env_names else {}


def protocol_fields(args, global_batch, steps_per_epoch, train_images=None):
    """Header keys that depend on the measurement protocol, for both trainers' parsed options.
    `train_images`: the training images the run draws from (after --max-train-images), what a
    full epoch would process: the sweet spot projects an epoch budget's cost from it."""
    return {**_protocol_keys(args, global_batch, steps_per_epoch), "train_images": train_images}


def _protocol_keys(args, global_batch, steps_per_epoch):
    if args.find_max_batch:
        return {"protocol": "max_batch", "epochs": 0, "images_per_epoch": None, "warmup_steps": 0,
                "timed_steps": PROBE_STEPS, "max_batch_limit": args.max_batch_limit}
    if args.protocol == "steps":
        # Two epoch records, the windows: the parser's "epochs asked" check counts them. An
        # adaptive window's images are known only once it ends (its epoch record has them).
        auto = args.timed_steps == AUTO_TIMED_STEPS
        return {"protocol": "steps", "epochs": 2,
                "images_per_epoch": None if auto else args.timed_steps * global_batch,
                "warmup_steps": args.warmup_steps, "timed_steps": args.timed_steps,
                "target_ci_pct": args.target_ci_pct if auto else None,
                "max_timed_steps": measure.timed_steps_cap(args.max_timed_steps, args.epochs,
                                                          steps_per_epoch) if auto else None}
    return {"protocol": "epochs", "epochs": args.epochs,
            "images_per_epoch": steps_per_epoch * global_batch,
            "warmup_steps": args.warmup_steps, "timed_steps": None}


def epoch_line(record: dict) -> str:
    """The reference's human line of a finished epoch."""
    return f"[EPOCH: {record['epoch']}] Training throughput: {record['throughput_img_s']:.3f} imgs/s"


def window_line(record: dict) -> str:
    """The human line of a steps-protocol window."""
    line = f"{record['phase']} window: {record['steps']} steps, {record['seconds']:.2f} s"
    if record["phase"] == "warmup":
        return line + " (left out of the step statistics)"
    line += (f", {record['throughput_img_s']:.1f} img/s, step median {record['step_time_median_s']:.4f} s, "
             f"p90 {record['step_time_p90_s']:.4f} s")
    if record.get("step_time_ci_pct") is not None:
        line += f", mean +/- {record['step_time_ci_pct']:.2f} % (95 %)"
    if record.get("stop_reason") == "target":
        line += f": target {record['target_ci_pct']:g} % reached"
    elif record.get("stop_reason") == "cap":
        line += f": target {record['target_ci_pct']:g} % NOT reached, stopped at the step cap"
    return line


def finish_lines(info, summary: dict) -> None:
    """The reference's closing lines of a run that finished."""
    info("Training finished!")
    # The steps protocol measures no time to solution.
    if summary["total_time_s"] is not None:
        info(f"Complete training Time: {summary['total_time_s']:.0f} s")
    # The reference's final throughput leaves epoch 1 out; with one epoch there is none to print.
    if summary["throughput_img_s"] is not None:
        info(f"Training throughput:    {summary['throughput_img_s']:.0f} imgs/s")
    if summary["memory_gb"] is not None:
        info(f"GPU memory reserved:    {summary['memory_gb']:.0f} GB")


def main(argv, parse, models, make_backend, started: float | None) -> int:
    """A trainer's main: parse the command line with `parse(argv)`; then print `models` for
    --list-models, or run the backend `make_backend()` returns."""
    args = parse(argv)
    if args.list_models:
        print("\n".join(models))
        return 0
    return run(make_backend(), args, started)
