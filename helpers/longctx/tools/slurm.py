"""A sweep on a SLURM cluster: one job array through submitit (a partition, QOS or GPU request the cluster lacks is
sbatch's to refuse, in its own words, before anything runs), the wait with the array's counts (squeue while a task is
queued or running, sacct once it ended), Ctrl-C cancelling the array, and a task that ended without recording its
point (cancelled, past --time, a failed node) recorded from SLURM's account of it."""

import shutil
import subprocess
import time
from pathlib import Path

from longctx import files
from longctx.errors import LongctxError
from longctx.notebook import write_json_atomic

# the sweep's SLURM options (CLI flags with "-" for "_") → submitit's names; None: not passed when not given
OPTIONS = {"partition": "slurm_partition", "gpus": "slurm_gpus_per_node", "time": "timeout_min", "account": "slurm_account"}
OPTIONS |= {"qos": "slurm_qos", "mem": "mem_gb", "cpus_per_task": "cpus_per_task"}  # mem in GB (submitit converts)
QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SUSPENDED", "CONFIGURING"}
# sacct's end states → the point's status ("timed out" and "oom" are results, the others are run again)
ENDED = {"TIMEOUT": "timed out", "DEADLINE": "timed out", "OUT_OF_MEMORY": "oom", "CANCELLED": "cancelled"}
ENDED |= dict.fromkeys(["FAILED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "COMPLETED"], "died")
POLL, SILENT_LIMIT, GRACE = 5.0, 300.0, 30.0  # seconds: between looks; SLURM not answering; a record's way to disk
RECORD = "slurm.json"  # in the sweep folder: the array last submitted, so a re-run never duplicates its live tasks


def _ask(*command: str, timeout: float = 30) -> str:
    """A SLURM command's output; a LongctxError naming it when it fails or does not answer in `timeout` s."""
    if shutil.which(command[0]) is None:
        raise LongctxError(f"SLURM's {command[0]} is not on this machine's PATH: run from the cluster's login node.")
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LongctxError(
            f"`{' '.join(command)}` did not answer in {timeout:.0f} s: is slurmctld up (`scontrol ping`), and does SLURM_CONF "
            "name the cluster's slurm.conf?"
        ) from None
    if done.returncode:
        said = " ".join((done.stderr or done.stdout).split())[:400]  # SLURM's own words, on one line
        raise LongctxError(
            f"SLURM did not answer `{' '.join(command)}` ({said}). Check that its controller runs (`scontrol ping`) and "
            "that SLURM_CONF names the cluster's slurm.conf, from the cluster's login node."
        )
    return done.stdout


def parameters(options: dict, name: str) -> dict:
    """submitit's parameters for the sweep's options: those given, and a one-hour default time."""
    return {"timeout_min": 60, "name": name, "slurm_array_parallelism": 256} | {OPTIONS[k]: v for k, v in options.items()}


def still_running(out: Path) -> None:
    """Refuse to run while the array this sweep submitted last still has tasks queued or running (with any executor:
    they would write the same points)."""
    last = (files.json_object(out / RECORD) or {}).get("array")
    if isinstance(last, str) and shutil.which("squeue") is None:
        return  # submitted elsewhere (a login node): this machine cannot ask
    try:
        known = states(last) if isinstance(last, str) else {}
    except LongctxError as exc:  # SLURM cannot tell here whether that array lives
        raise LongctxError(
            f"{exc} This sweep submitted job array {last} ({out / RECORD}); if it has ended, remove that file and run again here."
        ) from None
    if live := [s for s, _ in known.values() if s in QUEUED or s == "RUNNING"]:
        raise LongctxError(
            f"SLURM job array {last} of this sweep still has {len(live)} task(s) queued or running: wait for them "
            f"(finished points are reused), or `scancel {last}`; then run the same command again. Nothing was submitted."
        )


def submit(executor, function, calls: list[tuple], out: Path) -> str:
    """Submit one array task per call; returns the array's job id."""
    from submitit.core.utils import FailedJobError

    try:
        jobs = executor.map_array(function, *zip(*calls))
    except FailedJobError as exc:  # sbatch refused it: its own words
        why = next((line for line in str(exc).splitlines() if "error" in line.lower()), str(exc).strip())
        raise LongctxError(f"SLURM refused the sweep: {why}. Nothing was submitted.") from None
    array = jobs[0].job_id.split("_")[0]
    write_json_atomic(out / RECORD, {"array": array, "tasks": len(jobs)})
    return array


def states(array: str) -> dict[int, tuple[str, str]]:
    """Task → (state, reason): squeue for the tasks queued or running, sacct for those that ended (empty where the
    cluster keeps no accounting)."""
    found: dict[int, tuple[str, str]] = {}
    try:
        ended = _ask("sacct", "-n", "-P", "-X", "-j", array, "-o", "JobID,State,ExitCode", timeout=20)
    except LongctxError:  # no accounting on this cluster: squeue alone
        ended = ""
    for line in ended.splitlines():  # "123_4|CANCELLED by 0|0:15", or "123_[5-7]|..." for tasks that never started
        job, state, code = (line.split("|") + ["", ""])[:3]
        for task in _tasks(job, array):
            found[task] = (state.split()[0] if state else "", f"exit code {code}" if code else "")
    try:
        queued = _ask("squeue", "-h", "-r", "-j", array, "-o", "%i|%T|%r", timeout=20)
    except LongctxError as exc:  # an array that ended long ago is forgotten by slurmctld (MinJobAge): none queued
        if "Invalid job id" not in str(exc):
            raise
        queued = ""
    for line in queued.splitlines():
        job, state, reason = (line.split("|", 2) + ["", ""])[:3]
        for task in _tasks(job, array):
            found[task] = (state, reason)
    return found


def _tasks(job: str, array: str) -> list[int]:
    """The array's task numbers a job id names ("41_4", "41_[2-5,7%16]", read by submitit), or task 0 for "41" itself
    (submitit submits a single point as a plain job)."""
    from submitit.slurm.slurm import read_job_id

    spans = [span for span in read_job_id(job) if span[0] == array]
    return [t for _, a, *b in (s if len(s) > 1 else (*s, "0") for s in spans) for t in range(int(a), int((b or [a])[0]) + 1)]


def cancel(array: str) -> str:
    """scancel the whole array; what to tell the user."""
    try:
        _ask("scancel", array, timeout=30)
        return f"cancelled SLURM job array {array} (scancel {array})"
    except LongctxError as exc:
        return f"could not cancel SLURM job array {array} ({exc}); run `scancel {array}` yourself"


def wait(array: str, folders: list[Path], status, bar) -> dict[int, tuple[str, str]]:
    """Watch the array until every task has ended; returns task → (state, reason) for the tasks that SLURM ended
    (cancelled, past their time, a failed node) or that left no record (`status(folder)`: its recorded status or
    None). The bar counts queued, running, done and failed."""
    quiet_since, gone = None, {}
    while True:
        try:
            now, quiet_since = states(array), None
        except LongctxError as exc:  # slurmctld down or overloaded: keep waiting, up to a limit
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since > SILENT_LIMIT:
                raise LongctxError(
                    f"SLURM has not answered for {SILENT_LIMIT / 60:.0f} minutes ({exc}). Job array {array} is left as it "
                    "is; run the same command again later: finished points are reused, live ones are not resubmitted."
                ) from None
            bar.set_postfix_str(f"job {array}: SLURM is not answering ({exc})")
            time.sleep(POLL)
            continue
        counts, message = {"queued": 0, "running": 0, "done": 0, "failed": 0}, ""
        for task, folder in enumerate(folders):
            state, reason = now.get(task, ("", ""))
            if (recorded := status(folder)) and state not in QUEUED | {"RUNNING", "COMPLETING"}:
                counts["done" if recorded == "ok" else "failed"] += 1
                if state in ENDED:  # SLURM's account of how it ended, beside the point's own
                    gone.setdefault(task, (time.monotonic(), state, reason))
            elif state in QUEUED or state == "RUNNING" or state == "COMPLETING":
                counts["queued" if state in QUEUED else "running"] += 1
                if state in QUEUED and reason not in ("None", "Priority", "Resources", "BeginTime", ""):
                    message = f"task {task} waits: {reason}"  # a drained node, an unavailable partition, a held job
            else:  # ended (sacct's state) or left squeue with no accounting to say how: give its record time to land
                gone.setdefault(task, (time.monotonic(), state or "", reason))
                if time.monotonic() - gone[task][0] > (0 if state in ENDED and state != "COMPLETED" else GRACE):
                    counts["failed"] += 1
                else:
                    counts["running"] += 1
        bar.n = counts["done"] + counts["failed"]
        said = ", ".join(f"{v} {k}" for k, v in counts.items()) + (f"; {message}" if message else "")
        bar.set_postfix_str(f"job {array}: {said}", refresh=False)
        bar.refresh()
        if bar.n == len(folders):
            return {t: (s or "UNKNOWN", r) for t, (_, s, r) in gone.items() if s != "COMPLETED" or not status(folders[t])}
        time.sleep(POLL)


def ended_record(state: str, reason: str, array: str, task: int, log_dir: Path) -> dict:
    """The point's record of a task that ended without writing one: its status from SLURM's state, and why."""
    logs = sorted(log_dir.glob(f"{array}_{task}/*_log.err")) or sorted(log_dir.glob(f"{array}/*_log.err"))
    where = f"; its log: {logs[-1]}" if logs else ""
    said = "left the queue with no accounting to say why" if state == "UNKNOWN" else f"SLURM state {state}"
    return {"status": ENDED.get(state, "died"), "error": f"{said}{f' ({reason})' if reason not in ('', 'None') else ''}{where}"}
