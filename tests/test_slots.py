"""A worker's slot accounting (workers.slots): what the scheduler may claim into, and lending."""

from __future__ import annotations

import asyncio

from workers.slots import TURNS_AT_ONCE, Slots, hurry


def test_held_slots_are_not_free_until_their_job_ends() -> None:
    """Each claimed job takes a slot until its function ends; a release wakes the scheduler."""
    woken: list[int] = []
    slots = Slots(2, on_free=lambda: woken.append(1))
    slots.hold("a")
    slots.hold("b")
    assert slots.free() == 0
    slots.release("a")
    assert (slots.free(), len(woken)) == (1, 1)


def test_a_lent_slot_counts_as_free_and_comes_back_at_the_block_s_end() -> None:
    """While a job lends its slot the scheduler may claim into it (and is woken); afterwards the worker
    may be one over its size until a job ends, and claims nothing meanwhile."""
    woken: list[int] = []
    slots = Slots(1, on_free=lambda: woken.append(1))
    slots.hold("gating")
    with slots.lent("gating"):
        assert (slots.free(), len(woken)) == (1, 1)
        slots.hold("gate-item")
        assert slots.free() == 0
    assert slots.free() == 0
    slots.release("gate-item")
    assert slots.free() == 0
    slots.release("gating")
    assert slots.free() == 1


def test_a_slot_given_up_is_free_until_its_job_ends() -> None:
    """A job that starts no agent any more (a case recording its end) gives its slot up: the scheduler is
    woken once and may claim the next job into it at once, and the job's end does not free a second slot."""
    woken: list[int] = []
    slots = Slots(1, on_free=lambda: woken.append(1))
    slots.hold("ending")
    slots.give_up("ending")
    assert (slots.free(), len(woken)) == (1, 1)
    slots.give_up("ending")  # again (the case's end after its memory kept): no second wake, no second claim
    assert (slots.free(), len(woken)) == (1, 1)
    slots.hold("next")
    assert slots.free() == 0
    slots.release("ending")
    assert slots.free() == 0
    slots.release("next")
    assert slots.free() == 1


async def test_bookkeeping_waits_its_turn_until_the_jobs_claimed_have_started_their_agents() -> None:
    """A claim due, and a job claimed that has started no agent yet, keep bookkeeping's turn waiting; the
    turn comes once the claim is made and the job's agent starts, and at once when nothing starts."""
    slots = Slots(2)
    assert slots.turn().done()
    slots.claim_due(True)
    turn = slots.turn()
    assert not turn.done()
    slots.hold("next")
    slots.claim_due(False)
    assert not turn.done()  # claimed, but its agent has not started
    slots.starting("next", False)
    assert turn.done()
    slots.starting("next", True)  # its agent ended and another follows
    later = slots.turn()
    assert not later.done()
    slots.give_up("next")  # it starts no agent any more
    assert later.done()


async def test_a_job_waiting_on_the_fleet_or_ending_does_not_hold_bookkeeping_up() -> None:
    """A job that lends its slot, or whose function ends, is starting nothing: the turn comes."""
    slots = Slots(2)
    slots.hold("gating")
    slots.hold("other")
    turn = slots.turn()
    with slots.lent("gating"):
        assert not turn.done()
        slots.release("other")
        assert turn.done()


async def test_bookkeeping_waits_no_longer_than_its_bound() -> None:
    """A job that never starts its agent holds bookkeeping up for `bookkeeping_wait_max_s` at most."""
    slots = Slots(1, bookkeeping_wait_max_s=0.05)
    slots.hold("stuck")
    turn = slots.turn()
    assert not turn.done()
    await asyncio.wait_for(turn, timeout=10)  # the bound, not the job, ends the wait
    assert not slots.turn().done()  # the job still holds the next turn up


async def test_bookkeeping_goes_a_few_at_a_time_per_turn_of_the_loop() -> None:
    """Many waiting ends are let go a few per turn of the event loop, not all in one: a start that comes
    meanwhile waits for a few of them, not for all."""
    slots = Slots(1)
    slots.hold("starting")
    turns = [slots.turn() for _ in range(3 * TURNS_AT_ONCE)]
    slots.starting("starting", False)
    assert sum(t.done() for t in turns) == TURNS_AT_ONCE
    await asyncio.sleep(0)  # one turn of the loop: the next few
    assert sum(t.done() for t in turns) == 2 * TURNS_AT_ONCE
    slots.starting("starting", True)  # a start again: the rest waits for it
    await asyncio.sleep(0)
    assert sum(t.done() for t in turns) == 2 * TURNS_AT_ONCE
    slots.starting("starting", False)
    await asyncio.wait_for(asyncio.gather(*turns), timeout=10)


async def test_bookkeeping_its_job_hurried_takes_no_place_among_those_let_go() -> None:
    """Turns their jobs already hurried (the job waited for its record) are not counted among the few let
    go per turn of the loop: as many waiting ones go as if they had not been there."""
    slots = Slots(1)
    slots.hold("starting")
    hurried = [slots.turn() for _ in range(TURNS_AT_ONCE)]
    waiting = [slots.turn() for _ in range(TURNS_AT_ONCE)]
    for turn in hurried:
        hurry(turn)
    slots.starting("starting", False)
    assert all(turn.done() for turn in waiting)
