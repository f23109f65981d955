"""`BackgroundLoop`, the thread behind rollover, indexing and age-off: it steps on its timer
and when woken, stops promptly (also in the middle of a debounce), and keeps going after a
failing step."""

from __future__ import annotations

import threading
import time

from journals import BackgroundLoop


def test_steps_when_woken_and_on_its_timer():
    steps = []
    loop = BackgroundLoop("t", lambda: steps.append(1), interval=0.05, on_error=print)
    loop.start()
    time.sleep(0.3)
    loop.stop()
    assert len(steps) >= 3  # the timer alone
    n = len(steps)
    time.sleep(0.1)
    assert len(steps) == n  # stopped means stopped


def test_stop_during_a_debounce_ends_the_thread():
    stepped = threading.Event()
    loop = BackgroundLoop("t", stepped.set, interval=3600, debounce=3600, on_error=print)
    loop.start()
    loop.wake()
    time.sleep(0.05)  # the thread is in its debounce now
    stopper = threading.Thread(target=loop.stop, daemon=True)
    stopper.start()
    stopper.join(5)
    assert not stopper.is_alive(), "stop() hangs: the stop's wake was lost in the debounce"
    assert stepped.is_set()  # what woke it is still done once


def test_final_step_and_at_exit_run_in_the_thread():
    seen = []
    loop = BackgroundLoop(
        "t",
        lambda: seen.append(("step", threading.current_thread().name)),
        interval=3600,
        on_error=print,
        final_step=True,
        at_exit=lambda: seen.append(("exit", threading.current_thread().name)),
    )
    loop.start(step_now=True)
    time.sleep(0.05)
    loop.stop()
    assert seen == [("step", "t"), ("step", "t"), ("exit", "t")]


def test_a_failing_step_is_reported_with_its_backoff_and_the_loop_goes_on():
    errors: list[tuple[str, float]] = []
    calls = []

    def step() -> None:
        calls.append(1)
        if len(calls) <= 2:
            raise OSError("disk full")

    loop = BackgroundLoop(
        "t", step, interval=0.01, backoff=True, on_error=lambda e, s: errors.append((str(e), s))
    )
    loop.start(step_now=True)
    deadline = time.monotonic() + 10
    while len(calls) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    loop.stop()
    assert errors == [("disk full", 1.0), ("disk full", 2.0)]
    assert len(calls) >= 3


def test_stop_landing_just_before_the_wake_is_cleared_ends_the_thread():
    # stop() sets the stop flag and the wake; when that falls between the thread's wait
    # returning (woken by an ordinary wake) and its clearing the wake, the stop's wake is
    # cleared: the thread must still see the flag rather than sleep a whole interval.
    stepped = threading.Event()
    loop = BackgroundLoop("t", stepped.set, interval=3600, on_error=print)
    wake = loop._wake
    clear = wake.clear
    raced = []

    def clear_after_a_stop() -> None:
        if not raced:
            raced.append(1)
            loop._stop.set()  # what stop() does first, then wake.set()
            wake.set()
        clear()

    wake.clear = clear_after_a_stop  # type: ignore[method-assign]
    loop.start()
    loop.wake()
    thread = loop._thread
    assert thread is not None
    thread.join(5)  # what stop() then does
    assert raced and stepped.is_set()
    assert not thread.is_alive(), "stop() hangs: the stop's wake was cleared"
    loop.stop()
