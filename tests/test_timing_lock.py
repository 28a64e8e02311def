"""The GPU's timing lock (evals.locks.DeviceTimingLock): measurements exclusive, validations shared, a
waiting measurement not starved, and every wait bounded. flock locks belong to open file descriptions, so
two locks of one process exclude each other as two processes' would."""
import threading
import time

from evals.locks import DeviceTimingLock


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
