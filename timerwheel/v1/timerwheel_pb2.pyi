from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STATE_UNSPECIFIED: _ClassVar[State]
    SCHEDULED: _ClassVar[State]
    FIRED: _ClassVar[State]
    ACKED: _ClassVar[State]
    CANCELLED: _ClassVar[State]

class RetryKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY_KIND_UNSPECIFIED: _ClassVar[RetryKind]
    RETRY_FIXED: _ClassVar[RetryKind]
    RETRY_EXPONENTIAL: _ClassVar[RetryKind]

class MissedPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MISSED_FIRE_ONCE: _ClassVar[MissedPolicy]
    MISSED_FIRE_EACH: _ClassVar[MissedPolicy]

class IfExists(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    IF_EXISTS_REJECT: _ClassVar[IfExists]
    IF_EXISTS_REPLACE: _ClassVar[IfExists]
    IF_EXISTS_KEEP: _ClassVar[IfExists]

class TraceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRACE_KIND_UNSPECIFIED: _ClassVar[TraceKind]
    TRACE_SENT: _ClassVar[TraceKind]
    TRACE_CASCADED: _ClassVar[TraceKind]
    TRACE_FIRED: _ClassVar[TraceKind]
    TRACE_DELIVERED: _ClassVar[TraceKind]
    TRACE_NACKED: _ClassVar[TraceKind]
    TRACE_ACKED: _ClassVar[TraceKind]
    TRACE_CANCELLED: _ClassVar[TraceKind]
    TRACE_RESCHEDULED: _ClassVar[TraceKind]
    TRACE_DEAD_LETTERED: _ClassVar[TraceKind]
    TRACE_REPLACED: _ClassVar[TraceKind]
    TRACE_REDRIVEN: _ClassVar[TraceKind]
    TRACE_PAUSED: _ClassVar[TraceKind]
    TRACE_RESUMED: _ClassVar[TraceKind]
STATE_UNSPECIFIED: State
SCHEDULED: State
FIRED: State
ACKED: State
CANCELLED: State
RETRY_KIND_UNSPECIFIED: RetryKind
RETRY_FIXED: RetryKind
RETRY_EXPONENTIAL: RetryKind
MISSED_FIRE_ONCE: MissedPolicy
MISSED_FIRE_EACH: MissedPolicy
IF_EXISTS_REJECT: IfExists
IF_EXISTS_REPLACE: IfExists
IF_EXISTS_KEEP: IfExists
TRACE_KIND_UNSPECIFIED: TraceKind
TRACE_SENT: TraceKind
TRACE_CASCADED: TraceKind
TRACE_FIRED: TraceKind
TRACE_DELIVERED: TraceKind
TRACE_NACKED: TraceKind
TRACE_ACKED: TraceKind
TRACE_CANCELLED: TraceKind
TRACE_RESCHEDULED: TraceKind
TRACE_DEAD_LETTERED: TraceKind
TRACE_REPLACED: TraceKind
TRACE_REDRIVEN: TraceKind
TRACE_PAUSED: TraceKind
TRACE_RESUMED: TraceKind

class SendRequest(_message.Message):
    __slots__ = ("topic", "body", "properties", "deliver_at_ms", "delay_ms", "delay_level", "message_id", "if_exists", "max_attempts", "dead_letter_topic", "repeat", "retry")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    IF_EXISTS_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    deliver_at_ms: int
    delay_ms: int
    delay_level: int
    message_id: str
    if_exists: IfExists
    max_attempts: int
    dead_letter_topic: str
    repeat: Repeat
    retry: RetryPolicy
    def __init__(self, topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., deliver_at_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., delay_level: _Optional[int] = ..., message_id: _Optional[str] = ..., if_exists: _Optional[_Union[IfExists, str]] = ..., max_attempts: _Optional[int] = ..., dead_letter_topic: _Optional[str] = ..., repeat: _Optional[_Union[Repeat, _Mapping]] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("kind", "initial_ms", "max_ms", "multiplier", "jitter_percent")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INITIAL_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    JITTER_PERCENT_FIELD_NUMBER: _ClassVar[int]
    kind: RetryKind
    initial_ms: int
    max_ms: int
    multiplier: float
    jitter_percent: int
    def __init__(self, kind: _Optional[_Union[RetryKind, str]] = ..., initial_ms: _Optional[int] = ..., max_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., jitter_percent: _Optional[int] = ...) -> None: ...

class Repeat(_message.Message):
    __slots__ = ("every_ms", "cron", "time_zone", "end_at_ms", "max_count", "missed", "catch_up_window_ms", "max_catch_up")
    EVERY_MS_FIELD_NUMBER: _ClassVar[int]
    CRON_FIELD_NUMBER: _ClassVar[int]
    TIME_ZONE_FIELD_NUMBER: _ClassVar[int]
    END_AT_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_COUNT_FIELD_NUMBER: _ClassVar[int]
    MISSED_FIELD_NUMBER: _ClassVar[int]
    CATCH_UP_WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_CATCH_UP_FIELD_NUMBER: _ClassVar[int]
    every_ms: int
    cron: str
    time_zone: str
    end_at_ms: int
    max_count: int
    missed: MissedPolicy
    catch_up_window_ms: int
    max_catch_up: int
    def __init__(self, every_ms: _Optional[int] = ..., cron: _Optional[str] = ..., time_zone: _Optional[str] = ..., end_at_ms: _Optional[int] = ..., max_count: _Optional[int] = ..., missed: _Optional[_Union[MissedPolicy, str]] = ..., catch_up_window_ms: _Optional[int] = ..., max_catch_up: _Optional[int] = ...) -> None: ...

class SendResponse(_message.Message):
    __slots__ = ("message_id", "deliver_at_ms", "existed", "existing_state")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    EXISTING_STATE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    deliver_at_ms: int
    existed: bool
    existing_state: State
    def __init__(self, message_id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., existed: _Optional[bool] = ..., existing_state: _Optional[_Union[State, str]] = ...) -> None: ...

class SendBatchRequest(_message.Message):
    __slots__ = ("messages",)
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[SendRequest]
    def __init__(self, messages: _Optional[_Iterable[_Union[SendRequest, _Mapping]]] = ...) -> None: ...

class SendBatchResponse(_message.Message):
    __slots__ = ("results",)
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[SendResponse]
    def __init__(self, results: _Optional[_Iterable[_Union[SendResponse, _Mapping]]] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ("message_id",)
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    def __init__(self, message_id: _Optional[str] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("state",)
    STATE_FIELD_NUMBER: _ClassVar[int]
    state: State
    def __init__(self, state: _Optional[_Union[State, str]] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("message_id", "include_body", "include_trace")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_BODY_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_TRACE_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    include_body: bool
    include_trace: bool
    def __init__(self, message_id: _Optional[str] = ..., include_body: _Optional[bool] = ..., include_trace: _Optional[bool] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("topic", "from_ms", "to_ms", "limit", "page_token", "include_body", "id_prefix", "properties")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_BODY_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    topic: str
    from_ms: int
    to_ms: int
    limit: int
    page_token: str
    include_body: bool
    id_prefix: str
    properties: _containers.ScalarMap[str, str]
    def __init__(self, topic: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ..., include_body: _Optional[bool] = ..., id_prefix: _Optional[str] = ..., properties: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("messages", "next_page_token")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[TimerMessage]
    next_page_token: str
    def __init__(self, messages: _Optional[_Iterable[_Union[TimerMessage, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("topic", "max_in_flight", "consumer")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    topic: str
    max_in_flight: int
    consumer: str
    def __init__(self, topic: _Optional[str] = ..., max_in_flight: _Optional[int] = ..., consumer: _Optional[str] = ...) -> None: ...

class DeliveryBatch(_message.Message):
    __slots__ = ("deliveries",)
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[Delivery]
    def __init__(self, deliveries: _Optional[_Iterable[_Union[Delivery, _Mapping]]] = ...) -> None: ...

class Delivery(_message.Message):
    __slots__ = ("message_id", "topic", "body", "properties", "deliver_at_ms", "fired_at_ms", "attempt")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    deliver_at_ms: int
    fired_at_ms: int
    attempt: int
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., deliver_at_ms: _Optional[int] = ..., fired_at_ms: _Optional[int] = ..., attempt: _Optional[int] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ("topic", "message_ids")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ("acked",)
    ACKED_FIELD_NUMBER: _ClassVar[int]
    acked: int
    def __init__(self, acked: _Optional[int] = ...) -> None: ...

class NackRequest(_message.Message):
    __slots__ = ("topic", "message_ids", "reason", "redeliver_after_ms", "release")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REDELIVER_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    message_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: str
    redeliver_after_ms: int
    release: bool
    def __init__(self, topic: _Optional[str] = ..., message_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[str] = ..., redeliver_after_ms: _Optional[int] = ..., release: _Optional[bool] = ...) -> None: ...

class NackResponse(_message.Message):
    __slots__ = ("nacked", "dead_lettered")
    NACKED_FIELD_NUMBER: _ClassVar[int]
    DEAD_LETTERED_FIELD_NUMBER: _ClassVar[int]
    nacked: int
    dead_lettered: int
    def __init__(self, nacked: _Optional[int] = ..., dead_lettered: _Optional[int] = ...) -> None: ...

class TimerMessage(_message.Message):
    __slots__ = ("message_id", "topic", "body", "properties", "deliver_at_ms", "created_at_ms", "state", "wheel", "fired_at_ms", "acked_at_ms", "cancelled_at_ms", "repeat", "next_occurrence", "trace", "attempts", "paused")
    class PropertiesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    PROPERTIES_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    WHEEL_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ACKED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REPEAT_FIELD_NUMBER: _ClassVar[int]
    NEXT_OCCURRENCE_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    topic: str
    body: bytes
    properties: _containers.ScalarMap[str, str]
    deliver_at_ms: int
    created_at_ms: int
    state: State
    wheel: str
    fired_at_ms: int
    acked_at_ms: int
    cancelled_at_ms: int
    repeat: Repeat
    next_occurrence: int
    trace: _containers.RepeatedCompositeFieldContainer[TraceEvent]
    attempts: int
    paused: bool
    def __init__(self, message_id: _Optional[str] = ..., topic: _Optional[str] = ..., body: _Optional[bytes] = ..., properties: _Optional[_Mapping[str, str]] = ..., deliver_at_ms: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., state: _Optional[_Union[State, str]] = ..., wheel: _Optional[str] = ..., fired_at_ms: _Optional[int] = ..., acked_at_ms: _Optional[int] = ..., cancelled_at_ms: _Optional[int] = ..., repeat: _Optional[_Union[Repeat, _Mapping]] = ..., next_occurrence: _Optional[int] = ..., trace: _Optional[_Iterable[_Union[TraceEvent, _Mapping]]] = ..., attempts: _Optional[int] = ..., paused: _Optional[bool] = ...) -> None: ...

class TraceEvent(_message.Message):
    __slots__ = ("kind", "at_ms", "wheel", "from_wheel", "attempt", "subscriber", "detail", "deliver_at_ms")
    KIND_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    WHEEL_FIELD_NUMBER: _ClassVar[int]
    FROM_WHEEL_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    SUBSCRIBER_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    kind: TraceKind
    at_ms: int
    wheel: str
    from_wheel: str
    attempt: int
    subscriber: str
    detail: str
    deliver_at_ms: int
    def __init__(self, kind: _Optional[_Union[TraceKind, str]] = ..., at_ms: _Optional[int] = ..., wheel: _Optional[str] = ..., from_wheel: _Optional[str] = ..., attempt: _Optional[int] = ..., subscriber: _Optional[str] = ..., detail: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class ExportRequest(_message.Message):
    __slots__ = ("out_dir", "max_rows_per_file")
    OUT_DIR_FIELD_NUMBER: _ClassVar[int]
    MAX_ROWS_PER_FILE_FIELD_NUMBER: _ClassVar[int]
    out_dir: str
    max_rows_per_file: int
    def __init__(self, out_dir: _Optional[str] = ..., max_rows_per_file: _Optional[int] = ...) -> None: ...

class ExportResponse(_message.Message):
    __slots__ = ("out_dir", "rows", "files", "cut_at_ms", "seconds", "nodes", "timers", "bytes")
    OUT_DIR_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    CUT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    TIMERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    out_dir: str
    rows: int
    files: int
    cut_at_ms: int
    seconds: float
    nodes: _containers.RepeatedCompositeFieldContainer[ExportNode]
    timers: int
    bytes: int
    def __init__(self, out_dir: _Optional[str] = ..., rows: _Optional[int] = ..., files: _Optional[int] = ..., cut_at_ms: _Optional[int] = ..., seconds: _Optional[float] = ..., nodes: _Optional[_Iterable[_Union[ExportNode, _Mapping]]] = ..., timers: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class ExportNode(_message.Message):
    __slots__ = ("node", "address", "partitions", "out_dir", "rows", "files", "timers", "bytes", "cut_at_ms", "seconds")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OUT_DIR_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    TIMERS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    CUT_AT_MS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    partitions: _containers.RepeatedScalarFieldContainer[int]
    out_dir: str
    rows: int
    files: int
    timers: int
    bytes: int
    cut_at_ms: int
    seconds: float
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., partitions: _Optional[_Iterable[int]] = ..., out_dir: _Optional[str] = ..., rows: _Optional[int] = ..., files: _Optional[int] = ..., timers: _Optional[int] = ..., bytes: _Optional[int] = ..., cut_at_ms: _Optional[int] = ..., seconds: _Optional[float] = ...) -> None: ...

class StatsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class StatsResponse(_message.Message):
    __slots__ = ("now_ms", "queued_ops", "unacked", "column_family_keys", "rss_bytes", "cpu_seconds", "data_dir_bytes", "fire_lateness", "clock_steps_forward", "clock_steps_backward", "last_clock_step_ms", "last_clock_step_at_ms", "thread_cpu_seconds", "cluster", "sends_total", "fires_total", "acks_total")
    class ColumnFamilyKeysEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ThreadCpuSecondsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    NOW_MS_FIELD_NUMBER: _ClassVar[int]
    QUEUED_OPS_FIELD_NUMBER: _ClassVar[int]
    UNACKED_FIELD_NUMBER: _ClassVar[int]
    COLUMN_FAMILY_KEYS_FIELD_NUMBER: _ClassVar[int]
    RSS_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DATA_DIR_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRE_LATENESS_FIELD_NUMBER: _ClassVar[int]
    CLOCK_STEPS_FORWARD_FIELD_NUMBER: _ClassVar[int]
    CLOCK_STEPS_BACKWARD_FIELD_NUMBER: _ClassVar[int]
    LAST_CLOCK_STEP_MS_FIELD_NUMBER: _ClassVar[int]
    LAST_CLOCK_STEP_AT_MS_FIELD_NUMBER: _ClassVar[int]
    THREAD_CPU_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    SENDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    FIRES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    ACKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    now_ms: int
    queued_ops: int
    unacked: int
    column_family_keys: _containers.ScalarMap[str, int]
    rss_bytes: int
    cpu_seconds: float
    data_dir_bytes: int
    fire_lateness: _containers.RepeatedCompositeFieldContainer[LatenessMinute]
    clock_steps_forward: int
    clock_steps_backward: int
    last_clock_step_ms: int
    last_clock_step_at_ms: int
    thread_cpu_seconds: _containers.ScalarMap[str, float]
    cluster: ClusterStats
    sends_total: int
    fires_total: int
    acks_total: int
    def __init__(self, now_ms: _Optional[int] = ..., queued_ops: _Optional[int] = ..., unacked: _Optional[int] = ..., column_family_keys: _Optional[_Mapping[str, int]] = ..., rss_bytes: _Optional[int] = ..., cpu_seconds: _Optional[float] = ..., data_dir_bytes: _Optional[int] = ..., fire_lateness: _Optional[_Iterable[_Union[LatenessMinute, _Mapping]]] = ..., clock_steps_forward: _Optional[int] = ..., clock_steps_backward: _Optional[int] = ..., last_clock_step_ms: _Optional[int] = ..., last_clock_step_at_ms: _Optional[int] = ..., thread_cpu_seconds: _Optional[_Mapping[str, float]] = ..., cluster: _Optional[_Union[ClusterStats, _Mapping]] = ..., sends_total: _Optional[int] = ..., fires_total: _Optional[int] = ..., acks_total: _Optional[int] = ...) -> None: ...

class ClusterStats(_message.Message):
    __slots__ = ("node", "holder", "address", "partitions", "owned", "live_nodes", "delivering", "takeovers", "map")
    NODE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    OWNED_FIELD_NUMBER: _ClassVar[int]
    LIVE_NODES_FIELD_NUMBER: _ClassVar[int]
    DELIVERING_FIELD_NUMBER: _ClassVar[int]
    TAKEOVERS_FIELD_NUMBER: _ClassVar[int]
    MAP_FIELD_NUMBER: _ClassVar[int]
    node: str
    holder: str
    address: str
    partitions: int
    owned: _containers.RepeatedScalarFieldContainer[int]
    live_nodes: _containers.RepeatedScalarFieldContainer[str]
    delivering: bool
    takeovers: int
    map: _containers.RepeatedCompositeFieldContainer[ClusterPartition]
    def __init__(self, node: _Optional[str] = ..., holder: _Optional[str] = ..., address: _Optional[str] = ..., partitions: _Optional[int] = ..., owned: _Optional[_Iterable[int]] = ..., live_nodes: _Optional[_Iterable[str]] = ..., delivering: _Optional[bool] = ..., takeovers: _Optional[int] = ..., map: _Optional[_Iterable[_Union[ClusterPartition, _Mapping]]] = ...) -> None: ...

class ClusterPartition(_message.Message):
    __slots__ = ("partition", "owner", "address", "epoch", "verdict", "appended", "last_sequence", "stream_leader", "replicas_current", "replica_lag", "standby_sequence", "standby_lag", "snapshot_sequence", "snapshot_age_ms")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    APPENDED_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STREAM_LEADER_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_CURRENT_FIELD_NUMBER: _ClassVar[int]
    REPLICA_LAG_FIELD_NUMBER: _ClassVar[int]
    STANDBY_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STANDBY_LAG_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_AGE_MS_FIELD_NUMBER: _ClassVar[int]
    partition: int
    owner: str
    address: str
    epoch: int
    verdict: str
    appended: int
    last_sequence: int
    stream_leader: str
    replicas_current: int
    replica_lag: int
    standby_sequence: int
    standby_lag: int
    snapshot_sequence: int
    snapshot_age_ms: int
    def __init__(self, partition: _Optional[int] = ..., owner: _Optional[str] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ..., verdict: _Optional[str] = ..., appended: _Optional[int] = ..., last_sequence: _Optional[int] = ..., stream_leader: _Optional[str] = ..., replicas_current: _Optional[int] = ..., replica_lag: _Optional[int] = ..., standby_sequence: _Optional[int] = ..., standby_lag: _Optional[int] = ..., snapshot_sequence: _Optional[int] = ..., snapshot_age_ms: _Optional[int] = ...) -> None: ...

class LatenessMinute(_message.Message):
    __slots__ = ("minute_ms", "fires", "p50_ms", "p99_ms", "max_ms")
    MINUTE_MS_FIELD_NUMBER: _ClassVar[int]
    FIRES_FIELD_NUMBER: _ClassVar[int]
    P50_MS_FIELD_NUMBER: _ClassVar[int]
    P99_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_MS_FIELD_NUMBER: _ClassVar[int]
    minute_ms: int
    fires: int
    p50_ms: int
    p99_ms: int
    max_ms: int
    def __init__(self, minute_ms: _Optional[int] = ..., fires: _Optional[int] = ..., p50_ms: _Optional[int] = ..., p99_ms: _Optional[int] = ..., max_ms: _Optional[int] = ...) -> None: ...

class TopicsRequest(_message.Message):
    __slots__ = ("limit", "page_token")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    limit: int
    page_token: str
    def __init__(self, limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class TopicsResponse(_message.Message):
    __slots__ = ("topics", "next_page_token", "total")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicBacklog]
    next_page_token: str
    total: int
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicBacklog, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., total: _Optional[int] = ...) -> None: ...

class TopicBacklog(_message.Message):
    __slots__ = ("topic", "pending", "fired_unacked")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FIRED_UNACKED_FIELD_NUMBER: _ClassVar[int]
    topic: str
    pending: int
    fired_unacked: int
    def __init__(self, topic: _Optional[str] = ..., pending: _Optional[int] = ..., fired_unacked: _Optional[int] = ...) -> None: ...

class RescheduleRequest(_message.Message):
    __slots__ = ("message_id", "deliver_at_ms", "delay_ms", "delay_level")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    DELAY_LEVEL_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    deliver_at_ms: int
    delay_ms: int
    delay_level: int
    def __init__(self, message_id: _Optional[str] = ..., deliver_at_ms: _Optional[int] = ..., delay_ms: _Optional[int] = ..., delay_level: _Optional[int] = ...) -> None: ...

class RescheduleResponse(_message.Message):
    __slots__ = ("deliver_at_ms",)
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    deliver_at_ms: int
    def __init__(self, deliver_at_ms: _Optional[int] = ...) -> None: ...

class PauseSeriesRequest(_message.Message):
    __slots__ = ("series_id",)
    SERIES_ID_FIELD_NUMBER: _ClassVar[int]
    series_id: str
    def __init__(self, series_id: _Optional[str] = ...) -> None: ...

class PauseSeriesResponse(_message.Message):
    __slots__ = ("changed", "deliver_at_ms")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    deliver_at_ms: int
    def __init__(self, changed: _Optional[bool] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class ResumeSeriesRequest(_message.Message):
    __slots__ = ("series_id",)
    SERIES_ID_FIELD_NUMBER: _ClassVar[int]
    series_id: str
    def __init__(self, series_id: _Optional[str] = ...) -> None: ...

class ResumeSeriesResponse(_message.Message):
    __slots__ = ("changed", "deliver_at_ms")
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    deliver_at_ms: int
    def __init__(self, changed: _Optional[bool] = ..., deliver_at_ms: _Optional[int] = ...) -> None: ...

class CountRequest(_message.Message):
    __slots__ = ("topic", "from_ms", "to_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    from_ms: int
    to_ms: int
    def __init__(self, topic: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class CountResponse(_message.Message):
    __slots__ = ("pending", "from_ms", "to_ms")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    pending: int
    from_ms: int
    to_ms: int
    def __init__(self, pending: _Optional[int] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class TimerFilter(_message.Message):
    __slots__ = ("topic", "series_id", "id_prefix", "from_ms", "to_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SERIES_ID_FIELD_NUMBER: _ClassVar[int]
    ID_PREFIX_FIELD_NUMBER: _ClassVar[int]
    FROM_MS_FIELD_NUMBER: _ClassVar[int]
    TO_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    series_id: str
    id_prefix: str
    from_ms: int
    to_ms: int
    def __init__(self, topic: _Optional[str] = ..., series_id: _Optional[str] = ..., id_prefix: _Optional[str] = ..., from_ms: _Optional[int] = ..., to_ms: _Optional[int] = ...) -> None: ...

class BulkRequest(_message.Message):
    __slots__ = ("filter", "limit", "page_token")
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    filter: TimerFilter
    limit: int
    page_token: str
    def __init__(self, filter: _Optional[_Union[TimerFilter, _Mapping]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class BulkResponse(_message.Message):
    __slots__ = ("cancelled", "purged", "next_page_token", "more")
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    PURGED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    cancelled: int
    purged: int
    next_page_token: str
    more: bool
    def __init__(self, cancelled: _Optional[int] = ..., purged: _Optional[int] = ..., next_page_token: _Optional[str] = ..., more: _Optional[bool] = ...) -> None: ...

class RedriveRequest(_message.Message):
    __slots__ = ("dead_letter_topic", "filter", "limit", "page_token")
    DEAD_LETTER_TOPIC_FIELD_NUMBER: _ClassVar[int]
    FILTER_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    dead_letter_topic: str
    filter: TimerFilter
    limit: int
    page_token: str
    def __init__(self, dead_letter_topic: _Optional[str] = ..., filter: _Optional[_Union[TimerFilter, _Mapping]] = ..., limit: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class RedriveResponse(_message.Message):
    __slots__ = ("moved", "next_page_token", "more")
    MOVED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    moved: int
    next_page_token: str
    more: bool
    def __init__(self, moved: _Optional[int] = ..., next_page_token: _Optional[str] = ..., more: _Optional[bool] = ...) -> None: ...

class InFlightRequest(_message.Message):
    __slots__ = ("topic", "limit")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    limit: int
    def __init__(self, topic: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class InFlightResponse(_message.Message):
    __slots__ = ("messages", "fired_unacked", "tracked", "untracked_reason")
    MESSAGES_FIELD_NUMBER: _ClassVar[int]
    FIRED_UNACKED_FIELD_NUMBER: _ClassVar[int]
    TRACKED_FIELD_NUMBER: _ClassVar[int]
    UNTRACKED_REASON_FIELD_NUMBER: _ClassVar[int]
    messages: _containers.RepeatedCompositeFieldContainer[InFlightMessage]
    fired_unacked: int
    tracked: int
    untracked_reason: str
    def __init__(self, messages: _Optional[_Iterable[_Union[InFlightMessage, _Mapping]]] = ..., fired_unacked: _Optional[int] = ..., tracked: _Optional[int] = ..., untracked_reason: _Optional[str] = ...) -> None: ...

class InFlightMessage(_message.Message):
    __slots__ = ("message_id", "fire_seq", "attempt", "in_flight", "consumer", "peer", "ack_due_in_ms", "deliver_at_ms", "fired_at_ms")
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    FIRE_SEQ_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    ACK_DUE_IN_MS_FIELD_NUMBER: _ClassVar[int]
    DELIVER_AT_MS_FIELD_NUMBER: _ClassVar[int]
    FIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    message_id: str
    fire_seq: int
    attempt: int
    in_flight: bool
    consumer: str
    peer: str
    ack_due_in_ms: int
    deliver_at_ms: int
    fired_at_ms: int
    def __init__(self, message_id: _Optional[str] = ..., fire_seq: _Optional[int] = ..., attempt: _Optional[int] = ..., in_flight: _Optional[bool] = ..., consumer: _Optional[str] = ..., peer: _Optional[str] = ..., ack_due_in_ms: _Optional[int] = ..., deliver_at_ms: _Optional[int] = ..., fired_at_ms: _Optional[int] = ...) -> None: ...

class ConsumersRequest(_message.Message):
    __slots__ = ("topic",)
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    topic: str
    def __init__(self, topic: _Optional[str] = ...) -> None: ...

class ConsumersResponse(_message.Message):
    __slots__ = ("consumers", "lag")
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    LAG_FIELD_NUMBER: _ClassVar[int]
    consumers: _containers.RepeatedCompositeFieldContainer[ConsumerInfo]
    lag: _containers.RepeatedCompositeFieldContainer[TopicLag]
    def __init__(self, consumers: _Optional[_Iterable[_Union[ConsumerInfo, _Mapping]]] = ..., lag: _Optional[_Iterable[_Union[TopicLag, _Mapping]]] = ...) -> None: ...

class ConsumerInfo(_message.Message):
    __slots__ = ("topic", "consumer", "peer", "in_flight", "max_in_flight", "connected_at_ms", "draining")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    CONNECTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    consumer: str
    peer: str
    in_flight: int
    max_in_flight: int
    connected_at_ms: int
    draining: bool
    def __init__(self, topic: _Optional[str] = ..., consumer: _Optional[str] = ..., peer: _Optional[str] = ..., in_flight: _Optional[int] = ..., max_in_flight: _Optional[int] = ..., connected_at_ms: _Optional[int] = ..., draining: _Optional[bool] = ...) -> None: ...

class TopicLag(_message.Message):
    __slots__ = ("topic", "consumers", "pending", "fired_unacked", "in_flight", "oldest_unacked_fired_at_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    CONSUMERS_FIELD_NUMBER: _ClassVar[int]
    PENDING_FIELD_NUMBER: _ClassVar[int]
    FIRED_UNACKED_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    OLDEST_UNACKED_FIRED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    consumers: int
    pending: int
    fired_unacked: int
    in_flight: int
    oldest_unacked_fired_at_ms: int
    def __init__(self, topic: _Optional[str] = ..., consumers: _Optional[int] = ..., pending: _Optional[int] = ..., fired_unacked: _Optional[int] = ..., in_flight: _Optional[int] = ..., oldest_unacked_fired_at_ms: _Optional[int] = ...) -> None: ...

class ClusterMapRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ClusterMapResponse(_message.Message):
    __slots__ = ("cluster", "partitions", "node", "address", "owners")
    CLUSTER_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    OWNERS_FIELD_NUMBER: _ClassVar[int]
    cluster: bool
    partitions: int
    node: str
    address: str
    owners: _containers.RepeatedCompositeFieldContainer[PartitionOwner]
    def __init__(self, cluster: _Optional[bool] = ..., partitions: _Optional[int] = ..., node: _Optional[str] = ..., address: _Optional[str] = ..., owners: _Optional[_Iterable[_Union[PartitionOwner, _Mapping]]] = ...) -> None: ...

class PartitionOwner(_message.Message):
    __slots__ = ("partition", "node", "holder", "address", "epoch")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    HOLDER_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    partition: int
    node: str
    holder: str
    address: str
    epoch: int
    def __init__(self, partition: _Optional[int] = ..., node: _Optional[str] = ..., holder: _Optional[str] = ..., address: _Optional[str] = ..., epoch: _Optional[int] = ...) -> None: ...
