"""`BackgroundLoop`: the one stop/wake thread loop behind rollover, indexing and age-off."""

from __future__ import annotations

import threading
from collections.abc import Callable

MAX_RETRY_SECONDS = 60.0


class BackgroundLoop:
    """A daemon thread that runs `step()` every `interval` seconds and soon after `wake()`,
    until `stop()`.

    - `debounce`: after a wake, wait this long first, so a burst of wakes makes one step.
    - `backoff`: after a failed step wait 1 s, doubling up to a minute, if that is longer
      than `interval` (a failing disk is not hammered).
    - `final_step`: `stop()` lets the thread run one last step before it ends.
    - `at_exit`: called in the thread as it ends (e.g. to release what only it used).

    An exception from `step` goes to `on_error(exception, seconds until the next try)` and the
    loop goes on.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], object],
        *,
        interval: float,
        on_error: Callable[[Exception, float], None],
        debounce: float = 0.0,
        backoff: bool = False,
        final_step: bool = False,
        at_exit: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.interval = interval
        self._step = step
        self._on_error = on_error
        self._debounce = debounce
        self._backoff = backoff
        self._final_step = final_step
        self._at_exit = at_exit
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self, *, step_now: bool = False) -> None:
        """Start the thread (once); with `step_now` its first step runs at once."""
        if self._thread is not None:
            return
        if step_now:
            self._wake.set()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Run a step soon (after the debounce), without waiting for it."""
        self._wake.set()

    def stop(self) -> None:
        """Stop the thread and wait for it (after its final step, if it takes one)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        retry = 0.0
        try:
            while True:
                woke = self._wake.wait(timeout=max(self.interval, retry))
                stopping = self._stop.is_set()
                if stopping and not self._final_step:
                    break
                if woke and not stopping and self._debounce:
                    stopping = self._stop.wait(self._debounce)  # its wake is cleared next
                self._wake.clear()
                # stop() may have landed after the wait returned: the clear just ate its wake,
                # so read its flag again (what woke the thread is still done, then it ends).
                stopping = stopping or self._stop.is_set()
                try:
                    self._step()
                    retry = 0.0
                except Exception as e:
                    if self._backoff:
                        retry = min(max(1.0, retry * 2), MAX_RETRY_SECONDS)
                    self._on_error(e, retry)
                if stopping:
                    break
        finally:
            if self._at_exit is not None:
                self._at_exit()
