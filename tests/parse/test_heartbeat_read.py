"""The heartbeat reader against a writer that runs between its reads of the two slots.

The cross-process test in tests/arm/test_watchdog.py finds such an interleaving only by
chance (a reader preempted between slot 0 and slot 1 while the writer does two
checkpoints); here the writer's steps are placed exactly there.
"""
from hpc_hangkit.boot import _hangkit_core as fmt
from hpc_hangkit.parse import heartbeat


def _record(slots):
    """A v2 record with (seq, counter, label) in each slot, packed with the writer's structs."""
    buf = bytearray(fmt.HB_SIZE)
    fmt.HB_STATIC.pack_into(buf, 0, fmt.HB_MAGIC, fmt.HB_VERSION, fmt.HB_SIZE, 0, 2, 0, 123, 123,
                            10, 30.0, 1000.0, 50.0, b"node1")
    for off, (seq, counter, label) in zip(fmt.HB_SLOT_OFFSETS, slots):
        fmt.HB_SLOT.pack_into(buf, off, seq, counter, 50.0 + counter, label.encode())
    return buf


def _write(buf, k, seq, counter=None, label=""):
    off = fmt.HB_SLOT_OFFSETS[k]
    if counter is None:
        fmt.HB_SEQ.pack_into(buf, off, seq)
    else:
        fmt.HB_SLOT.pack_into(buf, off, seq, counter, 50.0 + counter, label.encode())


def _counter(slot):
    return fmt.HB_SLOT.unpack_from(slot, 0)[1]


def test_reader_preempted_between_slots_never_returns_an_overwritten_record():
    # after checkpoint 1: slot 0 holds the arming record (seq 2), slot 1 checkpoint 1 (seq 4)
    buf = _record([(2, 0, ""), (4, 1, "x 1")])
    calls = []

    def get(off, n):
        calls.append(off)
        if len(calls) == 4:  # slot 0 read whole; the rank now runs checkpoint 2 and half of 3
            _write(buf, 0, 6, 2, "x 2")
            _write(buf, 1, 7)
        return bytes(buf[off:off + n])

    # slot 0's seq 2 is whole as read, slot 1 is mid-write: without the recheck the
    # reader returned counter 0, older than the counter 1 current when it began
    assert heartbeat._newest_slot(get, fmt.HB_SLOT_OFFSETS) is None
    _write(buf, 1, 8, 3, "x 3")
    assert _counter(heartbeat._newest_slot(get, fmt.HB_SLOT_OFFSETS)) == 3


def test_reader_takes_the_whole_slot_while_the_other_is_mid_write():
    buf = _record([(6, 2, "x 2"), (7, 1, "x 1")])  # checkpoint 3 is writing slot 1
    slot = heartbeat._newest_slot(lambda off, n: bytes(buf[off:off + n]), fmt.HB_SLOT_OFFSETS)
    assert _counter(slot) == 2


def test_read_heartbeat_returns_the_newest_slot_from_a_file(tmp_path):
    p = tmp_path / "rank_0.pid123.hb"
    p.write_bytes(bytes(_record([(10, 4, "x 4"), (8, 3, "x 3")])))
    hb = heartbeat.read_heartbeat(str(p))
    assert (hb.counter, hb.label, hb.seq, hb.host) == (4, "x 4", 10, "node1")
