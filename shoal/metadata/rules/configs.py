"""Config rules: a topic's overrides, the dynamic cluster-wide broker configs and one broker's
dynamic overrides (Kafka's per-broker ``ConfigResource(BROKER, "<id>")``).

``set_*`` replace the whole mapping (callers that computed it from an image risk overwriting a
change made meanwhile); ``alter_topic_configs`` applies set/delete operations to the topic's
configs as they are when the change commits, so concurrent alterations of different keys all land.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from shoal.metadata import MetadataImage, TopicInfo
from shoal.metadata.change import Change, Result, unchanged
from shoal.metadata.rules import existing_topic


def set_topic_configs(image: MetadataImage, name: str, configs: Mapping[str, str]) -> Result[TopicInfo]:
    topic = existing_topic(image, name)
    new = dataclasses.replace(topic, configs=MappingProxyType(dict(configs)))
    return Result(Change(topics={name: new}), new)


def alter_topic_configs(image: MetadataImage, name: str, updates: Mapping[str, str | None]) -> Result[TopicInfo]:
    """Set (a value) or delete (None) each key of ``updates``; keys not named stay."""
    topic = existing_topic(image, name)
    configs = dict(topic.configs)
    for key, value in updates.items():
        if value is None:
            configs.pop(key, None)
        else:
            configs[key] = str(value)
    if configs == topic.configs:
        return unchanged(topic)
    new = dataclasses.replace(topic, configs=MappingProxyType(configs))
    return Result(Change(topics={name: new}), new)


def set_broker_configs(image: MetadataImage, configs: Mapping[str, str]) -> Result[None]:
    return Result(Change(broker_configs={str(k): str(v) for k, v in configs.items()}), None)


def set_broker_overrides(image: MetadataImage, node_id: int, configs: Mapping[str, str]) -> Result[None]:
    """Replace broker ``node_id``'s dynamic overrides (none left: its entry goes)."""
    new = {str(k): str(v) for k, v in configs.items()}
    if new == dict(image.broker_overrides.get(node_id, {})):
        return unchanged(None)
    return Result(Change(broker_overrides={int(node_id): MappingProxyType(new) if new else None}), None)
