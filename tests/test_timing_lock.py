"""The GPU's timing lock (evals.locks.DeviceTimingLock): measurements exclusive, validations shared, a
waiting measurement not starved, and every wait bounded. flock locks belong to open file descriptions, so
two locks of one process exclude each other as two processes' would."""
import threading
import time

import torch

from evals.locks import DeviceHold, DeviceTimingLock


def lock(tmp_path, shared=False, wait_s=0.3):
    return DeviceTimingLock("gpu-test/uuid", shared=shared, wait_s=wait_s, poll_s=0.005, folder=tmp_path)


def test_a_measurement_excludes_another_and_the_wait_is_bounded(tmp_path):
    with lock(tmp_path) as first:
        assert first.held
        t0 = time.monotonic()
        second = lock(tmp_path, wait_s=0.2).acquire()
        assert not second.held and 0.2 <= second.waited_s < 2.0 and time.monotonic() - t0 < 2.0
        second.release()
    again = lock(tmp_path).acquire()  # released by the first's exit
    assert again.held and again.waited_s < 0.2
    again.release()


def test_validations_share_it_and_a_measurement_waits_for_them(tmp_path):
    a, b = lock(tmp_path, shared=True).acquire(), lock(tmp_path, shared=True).acquire()
    assert a.held and b.held
    assert not lock(tmp_path, wait_s=0.1).acquire().held  # both validations still run
    a.release()
    b.release()
    m = lock(tmp_path).acquire()
    assert m.held
    assert not lock(tmp_path, shared=True, wait_s=0.1).acquire().held  # no validation beside a measurement
    m.release()


def test_a_waiting_measurement_holds_back_new_validations(tmp_path):
    running = lock(tmp_path, shared=True).acquire()
    got = {}

    def measure():
        got["m"] = lock(tmp_path, wait_s=5.0).acquire()

    t = threading.Thread(target=measure)
    t.start()
    time.sleep(0.2)  # the measurement now holds the gate and waits for the running validation
    late = lock(tmp_path, shared=True, wait_s=0.2).acquire()
    assert not late.held, "a validation arriving after a waiting measurement went first"
    running.release()
    t.join(5)
    assert got["m"].held and got["m"].waited_s >= 0.2
    got["m"].release()


def test_an_unusable_folder_measures_without_the_lock(tmp_path):
    missing = tmp_path / "no" / "such"
    got = DeviceTimingLock("gpu-x", folder=missing, wait_s=0.1).acquire()
    assert not got.held
    got.release()


def test_a_waiting_measurement_is_visible_to_shared_work_that_can_stop(tmp_path):
    running = lock(tmp_path, shared=True).acquire()
    assert not running.measurement_waiting()
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("m", lock(tmp_path, wait_s=5.0).acquire()))
    t.start()
    time.sleep(0.2)
    assert running.measurement_waiting(), "shared work cannot see the measurement waiting behind it"
    running.release()
    t.join(5)
    got["m"].release()
    assert not lock(tmp_path, shared=True).measurement_waiting()


def test_optional_work_gives_up_its_wait_at_once(tmp_path):
    m = lock(tmp_path).acquire()
    t0 = time.monotonic()
    calls = []
    optional = DeviceTimingLock("gpu-test/uuid", shared=True, wait_s=5.0, poll_s=0.005, folder=tmp_path,
                                give_up=lambda: calls.append(1) or len(calls) > 3).acquire()
    assert not optional.held and optional.gave_up and time.monotonic() - t0 < 1.0
    m.release()


def test_an_operation_s_hold_switches_between_shared_and_exclusive_without_waiting_for_itself(tmp_path):
    hold = DeviceHold(lambda shared: lock(tmp_path, shared=shared, wait_s=1.0))
    assert hold.shared().held
    other = lock(tmp_path, shared=True, wait_s=0.05).acquire()
    assert other.held  # validations side by side
    other.release()
    t0 = time.monotonic()
    assert hold.exclusive().held and time.monotonic() - t0 < 0.5  # its own shared hold was let go first
    assert not lock(tmp_path, shared=True, wait_s=0.05).acquire().held  # nothing beside a measurement
    assert hold.shared().held
    assert not lock(tmp_path, wait_s=0.05).acquire().held  # shared again: no other judge measures
    hold.release()
    assert lock(tmp_path, wait_s=0.05).acquire().held


def test_the_judge_draws_no_sets_ahead_while_another_judge_measures(tmp_path, monkeypatch):
    """Sets drawn ahead (input sets and their references: seconds of GPU work at KernelBench's sizes) are GPU
    work under the shared lock: none is drawn while another judge holds the lock for a measurement, and they are
    drawn once it is done."""
    from evals.judge.process import Judge
    from evals.problems import load_suite

    problem = next(p for p in load_suite("smoke") if p.name == "02_linear_relu_tiny")
    judge = Judge()
    try:
        monkeypatch.setattr(judge, "timing_lock", lambda device, settings, shared=False, give_up=None:
                            DeviceTimingLock("gpu-test/uuid", shared=shared, wait_s=0.2, poll_s=0.005,
                                             folder=tmp_path, give_up=give_up))
        cpu = torch.device("cpu")
        measuring = lock(tmp_path).acquire()
        judge.next_up = (problem, cpu, 2, 0)
        judge.idle(lambda: False)
        assert not judge.prepared, "sets were drawn beside another judge's measurement"
        assert judge.next_up is not None  # left for the next idle moment
        measuring.release()
        judge.idle(lambda: False)
        assert judge.prepared[judge._prepared_key(problem, cpu, "validate")].sets
    finally:
        judge.close()
