"""The typed errors and durations, without a cluster."""

import pytest

import raftlock
from raftlock import errors


def test_api_errors_match_their_code_and_carry_the_body():
    e = errors.api_error(409, "lock_held", "lock is held", "http://n1", holder={"session": "s1", "token": 7})
    assert isinstance(e, raftlock.LockHeldError) and isinstance(e, raftlock.APIError)
    assert (e.status, e.code, e.holder, e.endpoint) == (409, "lock_held", {"session": "s1", "token": 7}, "http://n1")
    assert str(e) == "raftlock: lock is held (409 lock_held): held by session s1 with token 7"
    for code, kind in [("invalid_argument", raftlock.InvalidArgumentError), ("unauthorized", raftlock.UnauthorizedError),
                       ("forbidden", raftlock.ForbiddenError), ("session_not_found", raftlock.SessionNotFoundError),
                       ("method_not_allowed", raftlock.NotFoundError), ("lock_delayed", raftlock.LockDelayedError),
                       ("attempt_cancelled", raftlock.AttemptCancelledError), ("not_holder", raftlock.NotHolderError),
                       ("limit_mismatch", raftlock.LimitMismatchError), ("mode_mismatch", raftlock.ModeMismatchError),
                       ("already_exists", raftlock.AlreadyExistsError), ("feature_not_enabled", raftlock.FeatureNotEnabledError),
                       ("incompatible", raftlock.IncompatibleError), ("payload_too_large", raftlock.PayloadTooLargeError),
                       ("too_many_requests", raftlock.TooManyRequestsError), ("no_leader", raftlock.NoLeaderError),
                       ("timeout", raftlock.OutcomeUnknownError), ("internal", raftlock.InternalError)]:
        assert isinstance(errors.api_error(400, code, "m"), kind), code
    # An unknown code of a server error is an internal error; of a refusal, an APIError only.
    assert isinstance(errors.api_error(502, "odd", "m"), raftlock.InternalError)
    assert type(errors.api_error(418, "odd", "m")) is raftlock.APIError
    assert errors.is_transient(errors.api_error(503, "no_leader", "m"))
    assert not errors.is_transient(errors.api_error(409, "lock_held", "m"))


def test_wrapped_errors_are_every_kind_with_the_prefix_once():
    cause = errors.api_error(404, "session_not_found", "gone")
    e = errors.wrap("unlock 'a': lock lost", raftlock.LockLostError, cause=cause)
    assert isinstance(e, raftlock.LockLostError) and isinstance(e, raftlock.SessionNotFoundError)
    assert isinstance(e, raftlock.APIError) and e.status == 404 and e.__cause__ is cause
    assert str(e).count("raftlock: ") == 1
    d = errors.wrap("lock 'a'", raftlock.CancelledError, cause=raftlock.DeadlineExceededError("deadline exceeded"))
    assert isinstance(d, raftlock.DeadlineExceededError) and isinstance(d, TimeoutError)


def test_durations():
    assert raftlock.parse_duration("1m30s") == 90
    assert raftlock.parse_duration("2.5s") == 2.5
    assert raftlock.parse_duration("1500ms") == 1.5
    assert raftlock.parse_duration("1h0m0s") == 3600
    with pytest.raises(ValueError):
        raftlock.parse_duration("10 parsecs")
    assert raftlock.format_duration(15) == "15s"
    assert raftlock.format_duration(2.5) == "2500ms"
    assert raftlock.format_duration(0) == "0s"


def test_wrapping_a_plain_error_keeps_it_a_raftlock_error():
    e = errors.wrap("leadership lost", cause=raftlock.RaftlockError("granted anew"))
    assert type(e) is raftlock.RaftlockError and str(e) == "raftlock: leadership lost: granted anew"
