# Loaded by every Python process started with this folder on PYTHONPATH (benchmarks/lesson_estimates.py sets it):
# wraps longctx's estimate so that each call's arguments and seconds are appended to $LONGCTX_ESTIMATE_LOG.
import json
import os
import time

if os.environ.get("LONGCTX_ESTIMATE_LOG"):
    import longctx.memory.estimate as _module

    _estimate = _module.estimate

    def estimate(model, seq_len, **kwargs):
        start = time.perf_counter()
        profile = _estimate(model, seq_len, **kwargs)
        if isinstance(model, str):  # a preset or a path; a config object is not logged (not re-run by the benchmark)
            entry = dict(model=model, seq_len=seq_len, kwargs=kwargs, seconds=time.perf_counter() - start)
            with open(os.environ["LONGCTX_ESTIMATE_LOG"], "a") as log:
                log.write(json.dumps(entry) + "\n")
        return profile

    _module.estimate = estimate
