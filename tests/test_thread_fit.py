"""The engine's intra-op threads follow the cores other processes leave free (cosyvoice/thread_fit.py): measured
from /proc/stat minus this process's own time, at most every half second, per calling thread."""

from __future__ import annotations

import threading

from cosyvoice_ui.cosyvoice.thread_fit import EVERY_S, ThreadFit, _own_ticks, _system_ticks


class _Machine:
    """Clock ticks of a 2-core machine: others' and our own busy time advance as the test says."""

    def __init__(self) -> None:
        self.total = self.busy = self.own = 0
        self.now = 0.0

    def run(self, seconds: float, others_cores: float, own_cores: float) -> None:
        ticks = int(seconds * 100)
        self.total += 2 * ticks
        self.busy += int((others_cores + own_cores) * ticks)
        self.own += int(own_cores * ticks)
        self.now += seconds


def _fit(machine: _Machine, applied: list[int]) -> ThreadFit:
    fit = ThreadFit(ceiling=2, cores=2, system=lambda: (machine.busy, machine.total), own=lambda: machine.own,
                    clock=lambda: machine.now, apply=applied.append)
    fit.enabled = True
    return fit


def test_threads_drop_to_one_while_another_process_takes_a_core_and_come_back() -> None:
    machine, applied = _Machine(), []
    fit = _fit(machine, applied)
    assert fit.tick() == 2  # the first look only starts the measurement
    machine.run(EVERY_S, others_cores=0.0, own_cores=2.0)
    assert fit.tick() == 2
    machine.run(EVERY_S, others_cores=1.0, own_cores=1.0)  # a neighbour keeps one core busy
    assert fit.tick() == 1
    machine.run(EVERY_S, others_cores=1.9, own_cores=0.1)  # both cores taken: still one, never zero
    assert fit.tick() == 1
    machine.run(EVERY_S, others_cores=0.1, own_cores=1.0)  # the neighbour left
    assert fit.tick() == 2
    assert applied == [2, 1, 2]  # set only when the count changes


def test_a_look_more_often_than_every_half_second_changes_nothing() -> None:
    machine, applied = _Machine(), []
    fit = _fit(machine, applied)
    fit.tick()
    machine.run(EVERY_S / 5, others_cores=2.0, own_cores=0.0)
    assert fit.tick() == 2


def test_each_thread_gets_the_count_set_on_it() -> None:
    machine, applied = _Machine(), []
    fit = _fit(machine, applied)
    fit.tick()
    machine.run(EVERY_S, others_cores=1.0, own_cores=1.0)
    assert fit.tick() == 1
    other = threading.Thread(target=fit.tick)
    other.start()
    other.join()
    assert applied == [2, 1, 1]  # the second thread had never been set


def test_the_switch_and_a_single_thread_leave_threads_alone(monkeypatch) -> None:
    monkeypatch.setenv("COSYVOICE_FIT_THREADS", "0")
    applied: list[int] = []
    assert not ThreadFit(ceiling=2, cores=2, apply=applied.append).enabled
    assert ThreadFit(ceiling=1, cores=2, apply=applied.append).tick() == 1
    assert applied == []


def test_the_proc_readers_read_this_machine() -> None:
    system, own = _system_ticks(), _own_ticks()
    assert system is not None and own is not None
    busy, total = system
    assert 0 <= busy <= total and own >= 0
