"""Settings are validated once, with messages that show the bad value."""

import pytest

from timerwheel.wheels.settings import ROCKETMQ_DELAY_LEVELS_MS, Settings, SettingsError


def test_defaults_are_the_documented_ones():
    settings = Settings()
    assert (settings.data_dir, settings.host, settings.port) == ("./data", "127.0.0.1", 7070)
    assert settings.sync_writes is True
    assert settings.workers == 0  # the whole server in one process
    assert settings.fire_tick_ms == 4
    assert settings.retention_ms == 3 * 24 * 3600 * 1000
    assert settings.max_delay_ms == 400 * 24 * 3600 * 1000
    assert settings.max_body_bytes == 4 * 1024 * 1024
    assert len(ROCKETMQ_DELAY_LEVELS_MS) == 18
    assert ROCKETMQ_DELAY_LEVELS_MS[0] == 1_000 and ROCKETMQ_DELAY_LEVELS_MS[-1] == 7_200_000


@pytest.mark.parametrize(
    ("changes", "shown"),
    [
        ({"port": 70000}, "port=70000"),
        ({"gil_switch_interval_ms": 0}, "gil_switch_interval_ms=0"),
        ({"gil_switch_interval_ms": 101}, "gil_switch_interval_ms=101"),
        ({"fire_tick_ms": 0}, "fire_tick_ms=0"),
        ({"fire_tick_ms": 1001}, "fire_tick_ms=1001"),
        ({"retention_ms": 0}, "retention_ms=0"),
        ({"fire_chunk": -5}, "fire_chunk=-5"),
        ({"wheel_write_buffer_bytes": 0}, "wheel_write_buffer_bytes=0"),
        ({"max_delay_ms": True}, "max_delay_ms=True"),
        ({"data_dir": ""}, "data_dir=''"),
        ({"delay_levels_ms": ()}, "delay_levels_ms=()"),
        ({"delay_levels_ms": (1000, 0)}, "level 2]=0"),
        ({"minute_cascade_lead_ms": 60_000}, "minute_cascade_lead_ms=60000"),
        ({"hour_cascade_lead_ms": 5_000}, "hour_cascade_lead_ms=5000"),
        ({"cascade_pace_percent": 91}, "cascade_pace_percent=91"),
        ({"cascade_pace_percent": -1}, "cascade_pace_percent=-1"),
        ({"workers": -1}, "workers=-1"),
        ({"settle_workers": 0}, "settle_workers=0"),
        ({"workers": 1000}, "workers=1000"),
        ({"first_delivery_hold_ms": -1}, "first_delivery_hold_ms=-1"),
        ({"first_delivery_hold_ms": 60_001}, "first_delivery_hold_ms=60001"),
        ({"first_delivery_hold_ms": 1.5}, "first_delivery_hold_ms=1.5"),
    ],
)
def test_bad_settings_are_refused_naming_the_value(changes, shown):
    with pytest.raises(SettingsError, match=shown.replace("(", r"\(").replace(")", r"\)")):
        Settings(**changes)


def test_replace_validates_again():
    with pytest.raises(SettingsError, match="sweep_chunk=0"):
        Settings().replace(sweep_chunk=0)
    assert Settings().replace(port=0).port == 0


@pytest.mark.parametrize(
    ("changes", "finish_ahead_ms"),
    [
        ({}, (10_000, 60_000)),  # the defaults: leads 50 s and 5 min, paced over 80%
        ({"cascade_pace_percent": 0}, (50_000, 300_000)),  # no pacing: the whole lead
        ({"cascade_pace_percent": 90, "minute_cascade_lead_ms": 1_000}, (100, 30_000)),
        # The hour's pace would end 6 s ahead: after the hour's first minute cascade starts.
        ({"hour_cascade_lead_ms": 60_000, "cascade_pace_percent": 90}, (5_000, 50_000)),
    ],
)
def test_a_cascades_pace_ends_where_the_next_level_needs_it(changes, finish_ahead_ms):
    assert Settings(**changes).cascade_finish_ahead_ms() == finish_ahead_ms
