"""The hot-path sensor: identical to QuotaSensor without pacing (a property over random
sequences), warm-up pacing with exact values, and the throttle-time statistics."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shoal.clock import ManualClock
from shoal.quotas.rate import RateConfig
from shoal.quotas.sensor import SampledStats, Sensor
from shoal.quotas.throttle import QuotaSensor, RequestQuotaSensor
from shoal.quotas.token_bucket import TokenBucket, token_throttle_time_ms

OPS = st.lists(
    st.tuples(
        st.sampled_from(["record", "record", "record", "unrecord", "measure"]),
        st.integers(min_value=0, max_value=25_000),  # ms to the next step (idle gaps expire samples)
        st.one_of(st.integers(min_value=0, max_value=5_000), st.floats(min_value=0, max_value=5_000)),
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, bound=st.sampled_from([1.0, 500.0, 1000.0, 12_345.6]),
       samples=st.integers(min_value=1, max_value=12), window_ms=st.sampled_from([1, 250, 1000]),
       capped=st.booleans())
def test_sensor_without_pacing_is_kafkas_quota_sensor(ops, bound, samples, window_ms, capped) -> None:
    """Every throttle, rate and window equals QuotaSensor's on the same sequence (the fast path
    never changes a result)."""
    cfg = RateConfig(samples=samples, window_ms=window_ms)
    ref = RequestQuotaSensor(bound, cfg) if capped else QuotaSensor(bound, cfg)
    fast = Sensor(bound, cfg, max_throttle_ms=cfg.window_ms if capped else None, pacing=False)
    now = 1_700_000_000_000
    for op, dt, value in ops:
        now += dt
        if op == "record":
            assert fast.record(value, now) == (ref.record(value, now), 0)
        elif op == "unrecord":
            fast.unrecord(value, now)
            ref.unrecord(value, now)
        else:
            assert fast.throttle_time_ms(now) == ref.throttle_time_ms(now)
            assert fast.rate.measure(now) == ref.rate.measure(now)
            assert fast.rate.window_size_ms(now) == ref.rate.window_size_ms(now)
        assert fast.max_value_in_quota_window(now) == ref.max_value_in_quota_window()


@settings(max_examples=200, deadline=None)
@given(ops=OPS, bound=st.sampled_from([1.0, 500.0, 12_345.6]), window_ms=st.sampled_from([250, 1000]))
def test_pacer_is_kafkas_token_bucket_one_window_deep(ops, bound, window_ms) -> None:
    """With pacing, the quota throttle is still QuotaSensor's and the pacing throttle is a
    TokenBucket's (full at the first record, one window deep, refilled at the bound)."""
    cfg = RateConfig(window_ms=window_ms)
    ref = QuotaSensor(bound, cfg)
    bucket: TokenBucket | None = None
    paced = Sensor(bound, cfg, pacing=True)
    now = 1_700_000_000_000
    for op, dt, value in ops:
        now += dt
        if op == "measure":
            continue
        if bucket is None:
            bucket = TokenBucket(bound, samples=1, window_ms=window_ms, tokens=bound * window_ms / 1000,
                                 last_update_ms=now)
        if op == "record":
            expected_pace = 0
            bucket.record(value, now)
            if bucket.tokens < 0:
                expected_pace = token_throttle_time_ms(bucket.tokens, bound)
            assert paced.record(value, now) == (ref.record(value, now), expected_pace)
        else:
            paced.unrecord(value, now)
            ref.unrecord(value, now)
            bucket.record(-value, now)


def test_issue_example_with_pacing() -> None:
    """400 B/s under a 500 B/s quota never touches the pacer; at the spike Kafka's throttle is
    2,100 ms exactly, and the pacer (500 B of credit, 2,300 B asked) asks for 3,600 ms."""
    clock = ManualClock()
    sensor = Sensor(500, pacing=True)
    for _ in range(10):
        assert sensor.record(400, clock.now_ms()) == (0, 0)
        clock.sleep(1.0)
    clock.sleep(0.5)
    assert sensor.record(2300, clock.now_ms()) == (2100, 3600)


def test_pacing_exact_values() -> None:
    """A new sensor at 1,000 B/s: one window (1,000 B) of credit, refilled at the bound; Kafka
    alone would let 10,000 B through at once."""
    clock = ManualClock()
    sensor = Sensor(1000, pacing=True)
    now = clock.now_ms()
    assert sensor.record(1000, now) == (0, 0)  # the credit, exactly
    assert sensor.record(500, now) == (0, 500)  # 500 B short: 500 ms at 1,000 B/s
    clock.sleep(0.2)
    assert sensor.record(100, clock.now_ms()) == (0, 400)  # -600 + 200 refilled = -400 -> 400 ms
    assert sensor.max_value_in_quota_window(clock.now_ms()) == 125  # a fetch: an eighth of a window
    # Kafka's own throttle is computed as ever alongside.
    kafka = QuotaSensor(1000)
    for t, v in ((0, 1000), (0, 500), (200, 100)):
        kafka.record(v, 1_700_000_000_000 + t)
    clock.sleep(0.5)
    assert sensor.record(0, clock.now_ms()) == (kafka.record(0, clock.now_ms()), 0)  # refilled: 100 B
    assert Sensor(1000, pacing=False).max_value_in_quota_window(0) == 10_000  # Kafka's cap


def greedy(sensor: Sensor, request: int, seconds: float, pause: tuple[int, int] = (0, 0)) -> list[tuple[int, int]]:
    """A client that sends ``request`` bytes whenever it is not throttled (and not in ``pause``,
    ms from its start)."""
    t0 = now = 1_700_000_000_000
    sent = []
    while now < t0 + seconds * 1000:
        if pause[0] <= now - t0 < pause[1]:
            now += 10
            continue
        sent.append((now - t0, request))
        now += max(sensor.record(request, now)) + 1
    return sent


def achieved(sent: list[tuple[int, int]], start_ms: int, end_ms: int, bound: float) -> float:
    return sum(v for t, v in sent if start_ms <= t < end_ms) / ((end_ms - start_ms) / 1000) / bound


def test_greedy_client_gets_its_quota_from_the_first_second_on() -> None:
    """The reason for pacing: with it a greedy client gets the quota in every stretch; without
    it (Kafka) ten windows at once, then nothing for ~9 s, and again every ~11 s."""
    paced = greedy(Sensor(1_000_000, pacing=True), 100_000, 40)
    assert 0.97 <= achieved(paced, 1000, 21_000, 1_000_000) <= 1.03
    assert 0.95 <= achieved(paced, 21_000, 40_000, 1_000_000) <= 1.05
    kafka = greedy(Sensor(1_000_000, pacing=False), 100_000, 40)
    assert achieved(kafka, 0, 1000, 1_000_000) >= 10
    assert achieved(kafka, 1000, 21_000, 1_000_000) < 0.7


def test_greedy_client_back_from_a_pause_gets_its_quota() -> None:
    """Back after 8 s idle, Kafka lets ~8 windows through at once and then starves the client
    (for good: the swing repeats); paced, it resumes at its quota."""
    paced = greedy(Sensor(1_000_000, pacing=True), 65_536, 50, pause=(15_000, 23_000))
    assert 0.97 <= achieved(paced, 24_000, 44_000, 1_000_000) <= 1.03
    kafka = greedy(Sensor(1_000_000, pacing=False), 65_536, 50, pause=(15_000, 23_000))
    assert achieved(kafka, 23_000, 24_000, 1_000_000) >= 4
    assert achieved(kafka, 24_000, 44_000, 1_000_000) < 0.8


def consumer(sensor: Sensor, fetch: int, seconds: float) -> list[tuple[int, int]]:
    """A consumer fetching ``fetch`` bytes (at most the cap) whenever it is not muted; a fetch
    over the quota comes back empty (Kafka: its bytes are taken back) after the throttle."""
    t0 = now = 1_700_000_000_000
    got = []
    while now < t0 + seconds * 1000:
        size = min(fetch, int(sensor.max_value_in_quota_window(now)))
        quota_ms, pace_ms = sensor.record(size, now)
        if quota_ms:
            sensor.unrecord(size, now)
        else:
            got.append((now - t0, size))
        now += max(quota_ms, pace_ms) + 2
    return got


def test_consumer_with_one_mib_fetches_gets_its_quota() -> None:
    """librdkafka fetches up to 1 MiB per partition: Kafka's cap (10 windows) lets that through
    at once and starves the consumer; with smoothing it gets 0.98-1.0 of its quota."""
    paced = consumer(Sensor(1_000_000, pacing=True), 1 << 20, 41)
    assert 0.97 <= achieved(paced, 1000, 21_000, 1_000_000) <= 1.02
    assert 0.97 <= achieved(paced, 1000, 41_000, 1_000_000) <= 1.02
    kafka = consumer(Sensor(1_000_000, pacing=False), 1 << 20, 41)
    assert achieved(kafka, 1000, 21_000, 1_000_000) < 0.6


def test_sampled_stats_average_and_max_over_the_window() -> None:
    cfg = RateConfig(samples=3, window_ms=1000)
    stats = SampledStats(cfg)
    assert (stats.avg(0), stats.max(0)) == (0.0, 0.0)
    stats.record(100, 0)
    stats.record(300, 500)
    stats.record(50, 1500)
    assert stats.avg(1600) == 150.0
    assert stats.max(1600) == 300
    # a sample expires samples x window after its last value
    assert stats.max(3500) == 50
    assert stats.avg(4500) == 0.0
