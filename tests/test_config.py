"""Broker and topic configuration: properties syntax, typing, precedence, sources, validation."""

from __future__ import annotations

import dataclasses
import logging
import sys
import types

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shoal.config import (
    BROKER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigType,
    describe_broker_configs,
    describe_topic_configs,
    log_config,
    parse_properties,
    topic_config_value,
    validate_dynamic_broker_configs,
    validate_topic_configs,
)


class TestProperties:
    def test_java_syntax(self):
        text = (
            "# comment\n"
            "! another comment\n"
            "   \n"
            "a=1\n"
            "b : 2\n"
            "c 3\n"
            "  d=  spaced value  \n"
            "e=first \\\n"
            "    second \\\n"
            "  third\n"
            "f=tab\\there\\nnewline\n"
            "g\\=key=v\n"
            "h=\\u0041\\u00e9\n"
            "i=\n"
            "j\n"
            "k=c:\\\\dir\n"
            "l==x\n"
            "m=a#not-a-comment\r\n"
            "n=crlf\r"
            "o=cr\n"
        )
        p = parse_properties(text)
        assert p == {
            "a": "1",
            "b": "2",
            "c": "3",
            "d": "spaced value  ",
            "e": "first second third",
            "f": "tab\there\nnewline",
            "g=key": "v",
            "h": "Aé",
            "i": "",
            "j": "",
            "k": "c:\\dir",
            "l": "=x",
            "m": "a#not-a-comment",
            "n": "crlf",
            "o": "cr",
        }

    def test_comment_does_not_continue(self):
        assert parse_properties("# x \\\na=1\n") == {"a": "1"}

    def test_even_backslashes_do_not_continue(self):
        assert parse_properties("a=x\\\\\nb=2\n") == {"a": "x\\", "b": "2"}

    @given(st.dictionaries(st.text(alphabet="abc.-_", min_size=1), st.text(alphabet="xyz 09=:#", max_size=10)))
    def test_simple_round_trip(self, d):
        def esc(s: str) -> str:
            return s.replace("\\", "\\\\").replace("=", "\\=").replace(":", "\\:").replace(" ", "\\ ").replace("#", "\\#")

        text = "".join(f"{esc(k)}={esc(v)}\n" for k, v in d.items())
        assert parse_properties(text) == d


class TestBrokerConfig:
    def test_defaults(self):
        c = BrokerConfig.load(None, {})
        assert c.node_id == 1
        assert c.listeners == [("PLAINTEXT", "127.0.0.1", 9092)]
        assert c.advertised_listeners == c.listeners
        assert c.data_dir == "./data"
        assert c.rack is None
        assert c.get("num.partitions") == 1
        assert c.get("default.replication.factor") == 1
        assert c.get("auto.create.topics.enable") is True
        assert c.get("message.max.bytes") == 1048588
        assert c.get("socket.request.max.bytes") == 104857600
        assert c.get("log.retention.ms") == 168 * 3600 * 1000
        assert c.get("log.roll.ms") == 168 * 3600 * 1000
        assert c.get("log.retention.bytes") == -1
        assert c.get("log.retention.check.interval.ms") == 300000
        assert c.get("min.insync.replicas") == 1
        assert c.get("unclean.leader.election.enable") is False
        assert c.get("compression.type") == "producer"
        assert c.get("delete.topic.enable") is True
        assert c.get("group.initial.rebalance.delay.ms") == 500  # Shoal: a new group starts fast
        assert c.get("fetch.max.bytes") == 57671680
        assert c.get("connections.max.idle.ms") == 600000
        assert c.get("log.cleanup.policy") == ("delete",)
        assert c.get("log.flush.interval.ms") == 2**63 - 1  # falls back to the scheduler interval
        assert c.source("num.partitions") == ConfigSource.DEFAULT_CONFIG

    def test_load_file_and_overrides(self, tmp_path):
        f = tmp_path / "server.properties"
        f.write_text(
            "node.id=7\n"
            "listeners=PLAINTEXT://:9092,INTERNAL://[::1]:0\n"
            "advertised.listeners=PLAINTEXT://kafka.example:19092\n"
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT\n"
            "log.dirs=/a, /b\n"
            "broker.rack=r1\n"
            "num.partitions=3\n"
            "zookeeper.connect=localhost:2181\n"
        )
        c = BrokerConfig.load(str(f), {"num.partitions": "5"})
        assert c.node_id == 7
        assert c.listeners == [("PLAINTEXT", "", 9092), ("INTERNAL", "::1", 0)]
        assert c.advertised_listeners == [("PLAINTEXT", "kafka.example", 19092)]
        assert c.data_dir == "/a"
        assert c.log_dirs == ["/a", "/b"]
        assert c.rack == "r1"
        assert c.get("num.partitions") == 5
        assert c.source("num.partitions") == ConfigSource.STATIC_BROKER_CONFIG
        assert c.get("zookeeper.connect") == "localhost:2181"  # unknown keys are kept
        assert c.unknown_keys == ["zookeeper.connect"]

    def test_unknown_key_warns(self, caplog):
        with caplog.at_level(logging.WARNING, logger="shoal.config"):
            BrokerConfig.load(None, {"foo.bar": "1"})
        assert "foo.bar" in caplog.text

    def test_log_dir_fallback_and_broker_id_alias(self):
        c = BrokerConfig.load(None, {"log.dir": "/x", "broker.id": "4"})
        assert c.data_dir == "/x"
        assert c.node_id == 4
        with pytest.raises(ConfigError):
            BrokerConfig.load(None, {"node.id": "1", "broker.id": "2"})

    @pytest.mark.parametrize(
        "key,value",
        [
            ("num.partitions", "zero"),
            ("num.partitions", "0"),
            ("num.partitions", "99999999999"),
            ("auto.create.topics.enable", "yes"),
            ("log.segment.bytes", "13"),
            ("log.message.timestamp.type", "Whenever"),
            ("log.cleanup.policy", "delete,nuke"),
            ("listeners", "nonsense"),
            ("listeners", "FOO://:9092"),  # no security protocol mapped
        ],
    )
    def test_bad_values_fail_at_load(self, key, value):
        with pytest.raises(ConfigError) as e:
            BrokerConfig.load(None, {key: value})
        assert e.value.code == "INVALID_CONFIG"

    def test_typed_values(self):
        c = BrokerConfig.load(
            None,
            {"auto.create.topics.enable": " FALSE ", "log.cleanup.policy": "compact, delete", "log.retention.bytes": "-1"},
        )
        assert c.get("auto.create.topics.enable") is False
        assert c.get("log.cleanup.policy") == ("compact", "delete")
        assert c.raw("log.cleanup.policy") == "compact,delete"
        assert c.raw("auto.create.topics.enable") == "false"

    def test_retention_precedence(self):
        hours = BrokerConfig.load(None, {"log.retention.hours": "2"})
        assert hours.get("log.retention.ms") == 2 * 3600_000
        assert hours.resolved("log.retention.ms").via == "log.retention.hours"
        mins = BrokerConfig.load(None, {"log.retention.hours": "2", "log.retention.minutes": "3"})
        assert mins.get("log.retention.ms") == 3 * 60_000
        ms = BrokerConfig.load(None, {"log.retention.hours": "2", "log.retention.minutes": "3", "log.retention.ms": "5"})
        assert ms.get("log.retention.ms") == 5
        assert ms.source("log.retention.ms") == ConfigSource.STATIC_BROKER_CONFIG
        unlimited = BrokerConfig.load(None, {"log.retention.hours": "-1"})
        assert unlimited.get("log.retention.ms") == -1
        roll = BrokerConfig.load(None, {"log.roll.hours": "1"})
        assert roll.get("log.roll.ms") == 3600_000

    def test_dynamic_layer(self):
        static = BrokerConfig.load(None, {"log.retention.ms": "1000", "num.partitions": "2"})
        eff = static.with_dynamic({"log.retention.hours": "3", "message.max.bytes": "10"})
        # a dynamic synonym beats a static one (Kafka removes the static synonyms of a dynamic key)
        assert eff.get("log.retention.ms") == 3 * 3600_000
        assert eff.source("log.retention.ms") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        assert eff.get("message.max.bytes") == 10
        assert eff.get("num.partitions") == 2
        assert static.get("message.max.bytes") == 1048588  # immutable
        assert eff.with_dynamic({}).get("message.max.bytes") == 1048588
        assert static.with_dynamic({}) is static

    def test_bad_dynamic_value_is_ignored_not_fatal(self):
        eff = BrokerConfig.load(None, {}).with_dynamic({"message.max.bytes": "lots"})
        assert eff.get("message.max.bytes") == 1048588

    def test_definitions_are_consistent(self):
        for name, d in BROKER_CONFIGS.items():
            assert d.name == name
            if d.default is not None:
                d.parse(d.default)  # defaults pass their own validators
        for name, t in TOPIC_CONFIGS.items():
            assert t.name == name


class TestTopicConfigs:
    def test_validate_accepts_good(self):
        validate_topic_configs(
            {
                "cleanup.policy": "compact,delete",
                "retention.ms": "-1",
                "segment.bytes": "14",
                "message.timestamp.type": "LogAppendTime",
                "min.cleanable.dirty.ratio": "0.1",
                "compression.type": "zstd",
                "leader.replication.throttled.replicas": "0:1,1:2",
            }
        )

    @pytest.mark.parametrize(
        "key,value",
        [
            ("no.such.config", "1"),
            ("segment.bytes", "13"),
            ("segment.bytes", "x"),
            ("cleanup.policy", "remove"),
            ("message.timestamp.type", "createtime"),
            ("retention.ms", "-2"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("compression.type", "brotli"),
            ("min.insync.replicas", "0"),
            ("preallocate", "maybe"),
            ("follower.replication.throttled.replicas", "x"),
        ],
    )
    def test_validate_rejects_bad(self, key, value):
        with pytest.raises(ConfigError) as e:
            validate_topic_configs({key: value})
        assert e.value.code == "INVALID_CONFIG"
        assert key in e.value.message

    def test_compaction_lag_conflict(self):
        with pytest.raises(ConfigError):
            validate_topic_configs({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})

    def test_describe_some_names_only(self):
        # DescribeConfigs' configuration_keys: the entries named (unknown names skipped), the same
        # entries as in the whole list, computed without the others (the console's topics page)
        broker = BrokerConfig.load(None, {}).with_dynamic({"log.retention.hours": "5"})
        every = {e.name: e for e in describe_topic_configs(broker, {"cleanup.policy": "compact"})}
        some = describe_topic_configs(broker, {"cleanup.policy": "compact"}, ["retention.ms", "cleanup.policy", "nope"])
        assert [e.name for e in some] == ["cleanup.policy", "retention.ms"]
        assert some == [every["cleanup.policy"], every["retention.ms"]]
        assert describe_topic_configs(broker, {}, []) == []

    def test_describe_sources_and_synonyms(self):
        broker = BrokerConfig.load(None, {"log.segment.bytes": "1000"}).with_dynamic({"log.retention.hours": "5"})
        entries = {e.name: e for e in describe_topic_configs(broker, {"cleanup.policy": "compact"})}
        assert set(entries) == set(TOPIC_CONFIGS)

        cp = entries["cleanup.policy"]
        assert cp.value == "compact" and cp.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and not cp.is_default
        assert [(s.name, s.value, s.source) for s in cp.synonyms] == [
            ("cleanup.policy", "compact", ConfigSource.DYNAMIC_TOPIC_CONFIG),
            ("log.cleanup.policy", "delete", ConfigSource.DEFAULT_CONFIG),
        ]
        assert cp.config_type == ConfigType.LIST

        sb = entries["segment.bytes"]
        assert sb.value == "1000" and sb.source == ConfigSource.STATIC_BROKER_CONFIG
        assert [(s.name, s.source) for s in sb.synonyms] == [
            ("log.segment.bytes", ConfigSource.STATIC_BROKER_CONFIG),
            ("log.segment.bytes", ConfigSource.DEFAULT_CONFIG),
        ]

        rm = entries["retention.ms"]
        assert rm.value == str(5 * 3600_000) and rm.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        assert [(s.name, s.value, s.source) for s in rm.synonyms] == [
            ("log.retention.hours", "5", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
        ]

        mm = entries["max.message.bytes"]
        assert mm.value == "1048588" and mm.source == ConfigSource.DEFAULT_CONFIG and mm.is_default
        assert not mm.read_only and not mm.is_sensitive and mm.documentation

    def test_topic_value(self):
        broker = BrokerConfig.load(None, {"message.max.bytes": "500"})
        assert topic_config_value(broker, {}, "max.message.bytes") == 500
        assert topic_config_value(broker, {"max.message.bytes": "7"}, "max.message.bytes") == 7

    def test_describe_broker(self):
        broker = BrokerConfig.load(None, {"num.partitions": "4"}).with_dynamic({"log.retention.ms": "99"})
        entries = {e.name: e for e in describe_broker_configs(broker)}
        assert entries["num.partitions"].value == "4"
        assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
        assert entries["num.partitions"].read_only
        assert entries["log.retention.ms"].value == "99"
        assert entries["log.retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
        assert not entries["log.retention.ms"].read_only
        assert [s.name for s in entries["log.retention.ms"].synonyms] == ["log.retention.ms", "log.retention.hours"]
        assert entries["fetch.max.bytes"].source == ConfigSource.DEFAULT_CONFIG
        cluster = describe_broker_configs(broker, cluster_default=True)
        assert [(e.name, e.value, e.source) for e in cluster] == [
            ("log.retention.ms", "99", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
        ]

    def test_dynamic_broker_validation(self):
        validate_dynamic_broker_configs({"log.retention.ms": "5", "message.max.bytes": "100"})
        with pytest.raises(ConfigError) as e:
            validate_dynamic_broker_configs({"listeners": "PLAINTEXT://:1", "log.retention.ms": "5"})
        assert e.value.code == "INVALID_REQUEST"
        assert "Cannot update these configs dynamically" in e.value.message
        with pytest.raises(ConfigError) as e:
            validate_dynamic_broker_configs({"message.max.bytes": "-5"})
        assert e.value.code == "INVALID_CONFIG"


class TestLogConfig:
    def test_log_config_maps_fields(self, monkeypatch):
        try:
            from shoal.storage import LogConfig  # noqa: F401
        except ImportError:
            @dataclasses.dataclass(frozen=True)
            class LogConfig:  # the storage engineer's contract
                segment_bytes: int = 0
                segment_ms: int = 0
                segment_jitter_ms: int = 0
                retention_ms: int = 0
                retention_bytes: int = 0
                index_interval_bytes: int = 0
                segment_index_bytes: int = 0
                max_message_bytes: int = 0
                message_timestamp_type: str = ""
                flush_messages: int = 0
                flush_ms: int = 0
                file_delete_delay_ms: int = 0
                cleanup_policy: tuple = ()

            fake = types.ModuleType("shoal.storage")
            fake.LogConfig = LogConfig
            monkeypatch.setitem(sys.modules, "shoal.storage", fake)
        broker = BrokerConfig.load(None, {"log.segment.bytes": "2048", "log.retention.hours": "1"})
        lc = log_config(broker, {"retention.bytes": "77", "message.timestamp.type": "LogAppendTime"})
        assert lc.segment_bytes == 2048
        assert lc.retention_ms == 3600_000
        assert lc.retention_bytes == 77
        assert lc.segment_ms == 168 * 3600_000
        assert lc.segment_jitter_ms == 0
        assert lc.max_message_bytes == 1048588
        assert lc.message_timestamp_type == "LogAppendTime"
        assert lc.index_interval_bytes == 4096
        assert lc.segment_index_bytes == 10485760
        assert lc.file_delete_delay_ms == 60000
        assert lc.flush_messages == 2**63 - 1
        assert lc.flush_ms == 2**63 - 1
        assert lc.cleanup_policy in (("delete",), "delete")


def test_kerberos_settings_are_accepted_dynamically_for_compatibility():
    """librdkafka's 0081_admin alters sasl.kerberos.min.time.before.relogin on a broker and
    expects success, as Kafka gives (dynamic per listener there); Shoal stores it, no effect."""
    from shoal.config import ConfigError, validate_dynamic_broker_configs

    validate_dynamic_broker_configs({"sasl.kerberos.min.time.before.relogin": "58000",
                                     "sasl.kerberos.service.name": "kafka"})
    with pytest.raises(ConfigError, match="Invalid value"):
        validate_dynamic_broker_configs({"sasl.kerberos.min.time.before.relogin": "soon"})
