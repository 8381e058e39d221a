"""The notice delivery path (ADR-17) against a real nats-server: relay, metadata endpoint, and the
agent's subscriber with its metadata poll behind NATS."""

from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agent.intake import NoticeIntake
from agent.metadata import fetch_notice
from infra import servers
from provider.notices import (
    MetadataServer,
    Notice,
    NoticeBoard,
    NoticeFormatError,
    NoticeRelay,
    ReclaimAdvisory,
    RelayUnavailableError,
    message_from_json,
    notice_subject,
)
from schemas.events import Advisory, Envelope
from tests.factories import T0_US, notice

REGION = "eu-west-1"
DELIVERY_BOUND_S = 1.0  # the provider contract: a notice reaches the node within 1 s
POLL_S = 0.05
T = TypeVar("T")


def run(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run an async scenario with an overall bound, so a hang fails instead of stalling."""

    async def bounded() -> T:
        return await asyncio.wait_for(scenario(), timeout=20)

    return asyncio.run(bounded())


def a_notice(instance: int = 7, seq: int = 0) -> Notice:
    return Notice.from_event(notice(REGION, instance, seq))


def dead_nats_url() -> str:
    """A NATS URL on which nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"nats://127.0.0.1:{port}"


# -- the record and its JSON ------------------------------------------------------------------


def test_a_notice_is_read_from_a_notice_received_event_and_round_trips_as_json() -> None:
    event = notice(REGION, 7)
    note = Notice.from_event(event)

    assert note.event_id == event.event_id
    assert (note.instance_id, note.pool_id, note.workload_id) == ("i-00007", "pool-0", "wl-2")
    assert note.deadline_at_us == T0_US + 120_000_000
    assert note.issued_at_us == T0_US
    assert note.subject == "spotcap.eu-west-1.notice.i-00007"
    assert json.loads(note.to_json())["deadline_at"] == T0_US + 120_000_000
    assert message_from_json(note.to_json()) == note
    assert Notice.from_json(note.to_json()) == note


def test_an_advisory_is_read_from_an_advisory_event() -> None:
    base = notice(REGION, 3)
    event = Envelope(
        event_id="5b0a7a53-8c60-4f1a-9d6e-3c2b1a0f9e8d",
        event_type="advisory",
        occurred_at=T0_US,
        recorded_at=T0_US + 1_000,
        region=REGION,
        key="i-00003",
        causation_id=None,
        correlation_id=None,
        producer="tests",
        payload=Advisory("i-00003", "pool-3", T0_US + 600_000_000),
    )
    advisory = ReclaimAdvisory.from_event(event)
    assert advisory.subject == "spotcap.eu-west-1.advisory.i-00003"
    assert message_from_json(advisory.to_json()) == advisory
    with pytest.raises(TypeError, match="notice_received"):
        Notice.from_event(event)
    with pytest.raises(TypeError, match="advisory"):
        ReclaimAdvisory.from_event(base)


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        (b"not json", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"kind": "drill"}', "'kind'"),
        (b'{"kind": "notice", "event_id": "e"}', "'region'"),
        (
            b'{"kind":"notice","event_id":"e","region":"r","instance_id":"i","pool_id":"p",'
            b'"workload_id":"w","deadline_at":true,"issued_at":1}',
            "'deadline_at' must be an integer",
        ),
        (b"{" + b" " * 5000 + b"}", "over 4096"),
    ],
)
def test_malformed_messages_are_refused_naming_the_field(raw: bytes, error: str) -> None:
    with pytest.raises(NoticeFormatError, match=error):
        message_from_json(raw)


def test_subjects_refuse_tokens_that_would_change_the_subject() -> None:
    assert notice_subject("eu-west-1", "9b1f6c2e-4d3a") == "spotcap.eu-west-1.notice.9b1f6c2e-4d3a"
    for bad in ("a.b", "*", ">", "a b", ""):
        with pytest.raises(ValueError, match="NATS subject token"):
            notice_subject(REGION, bad)


# -- the metadata endpoint --------------------------------------------------------------------


def _http(method: str, url: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_metadata_endpoint_answers_404_until_a_notice_is_pending_then_200() -> None:
    note = a_notice()

    async def scenario() -> None:
        board = NoticeBoard()
        async with MetadataServer(board) as server:
            url = f"{server.url}/v1/instances/{note.instance_id}/notice"
            status, body = await asyncio.to_thread(_http, "GET", url)
            assert (status, body) == (404, {"error": "no notice pending"})
            assert await fetch_notice(server.url, note.instance_id) is None

            board.post(note)
            status, body = await asyncio.to_thread(_http, "GET", url)
            assert (status, body) == (200, note.to_dict())
            assert await fetch_notice(server.url, note.instance_id) == note
            assert await fetch_notice(server.url, "i-99999") is None

            status, _ = await asyncio.to_thread(_http, "POST", url)
            assert status == 405
            status, _ = await asyncio.to_thread(_http, "GET", f"{server.url}/v1/instances")
            assert status == 404

            board.withdraw(note.instance_id)
            assert await fetch_notice(server.url, note.instance_id) is None

    run(scenario)


# -- relay and subscriber over real NATS ------------------------------------------------------


def test_a_published_notice_reaches_the_subscriber_within_the_contract_bound(
    nats: servers.Server,
) -> None:
    note = a_notice(11)

    async def scenario() -> None:
        async with (
            NoticeIntake(REGION, note.instance_id, nats_servers=[nats.address]) as sub,
            await NoticeRelay.connect(nats.address) as relay,
        ):
            assert await sub.wait_subscribed(timeout_s=5)
            await relay.publish(note)
            delivery = await sub.get(timeout_s=DELIVERY_BOUND_S)
            assert (delivery.message, delivery.source) == (note, "nats")

            other = a_notice(12)  # another instance's subject: not delivered here
            await relay.publish(other)
            with pytest.raises(TimeoutError):
                await sub.get(timeout_s=0.2)

    run(scenario)


def test_duplicates_from_either_channel_are_delivered_once(nats: servers.Server) -> None:
    note = a_notice(21)
    advisory = ReclaimAdvisory(
        "7c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f", REGION, note.instance_id, "pool-0", T0_US, T0_US
    )

    async def scenario() -> None:
        board = NoticeBoard()
        async with (
            MetadataServer(board) as metadata,
            NoticeIntake(
                REGION,
                note.instance_id,
                nats_servers=[nats.address],
                metadata_url=metadata.url,
                poll_interval_s=POLL_S,
            ) as sub,
            await NoticeRelay.connect(nats.address) as relay,
        ):
            assert await sub.wait_subscribed(timeout_s=5)
            await relay.publish(advisory)
            for _ in range(3):
                await relay.publish(note)
            board.post(note)
            first = await sub.get(timeout_s=DELIVERY_BOUND_S)
            second = await sub.get(timeout_s=DELIVERY_BOUND_S)
            assert (first.message, first.source) == (advisory, "nats")
            assert (second.message, second.source) == (note, "nats")
            await relay.publish(note)
            with pytest.raises(TimeoutError):  # ten polls and a fourth publish later: nothing
                await sub.get(timeout_s=POLL_S * 10)

    run(scenario)


def test_with_nats_unreachable_the_metadata_poll_delivers() -> None:
    note = a_notice(31)
    dead = dead_nats_url()

    async def scenario() -> None:
        with pytest.raises(RelayUnavailableError):
            await NoticeRelay.connect(dead, connect_timeout_s=0.5)
        board = NoticeBoard()
        async with (
            MetadataServer(board) as metadata,
            NoticeIntake(
                REGION,
                note.instance_id,
                nats_servers=[dead],
                metadata_url=metadata.url,
                poll_interval_s=POLL_S,
                connect_timeout_s=0.5,
            ) as sub,
        ):
            board.post(note)
            delivery = await sub.get(timeout_s=DELIVERY_BOUND_S)
            assert (delivery.message, delivery.source) == (note, "metadata")
            assert not await sub.wait_subscribed(timeout_s=0.01)

    run(scenario)


def test_when_nats_stops_after_subscribing_the_metadata_poll_still_delivers(
    tmp_path: Path,
) -> None:
    own = servers.start_nats(tmp_path / "nats")
    note = a_notice(41)

    async def scenario() -> None:
        board = NoticeBoard()
        async with (
            MetadataServer(board) as metadata,
            NoticeIntake(
                REGION,
                note.instance_id,
                nats_servers=[own.address],
                metadata_url=metadata.url,
                poll_interval_s=POLL_S,
            ) as sub,
            await NoticeRelay.connect(own.address, flush_timeout_s=0.5) as relay,
        ):
            assert await sub.wait_subscribed(timeout_s=5)
            await asyncio.to_thread(servers.stop, own)
            with pytest.raises(RelayUnavailableError):
                await relay.publish(note)
            board.post(note)
            delivery = await sub.get(timeout_s=DELIVERY_BOUND_S)
            assert (delivery.message, delivery.source) == (note, "metadata")

    try:
        run(scenario)
    finally:
        servers.stop(own)
