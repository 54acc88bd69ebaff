"""Past one machine: three `autograd-course serve` processes on one real PostgreSQL database, nginx in front as the
load balancer, a load of uploads through it, one process SIGKILLed mid-load. Every acknowledged upload is
graded exactly once, the attempt limit holds across processes, and every student's counted score is there.
The steps: tests/support/scale_out.py."""

from __future__ import annotations

import pytest

from tests.support.helpers import needs_tool
from tests.support.scale_out import (
    Cluster,
    cluster,
    every_acknowledged_attempt_is_graded,
    every_reply_is_an_attempt_a_refusal_or_cut_off,
    every_stored_attempt_is_graded_once_within_the_limit,
    every_student_is_counted,
    the_killed_processs_claims_went_back,
    upload_all_at_once_and_kill_one,
    wait_for_the_balancer,
)
from tests.support.service import NGINX

pytestmark = [pytest.mark.slow, needs_tool("nginx", NGINX is not None, "the scale-out test balances with it")]


@pytest.fixture
def three_behind_nginx(tmp_path, postgres_url):
    with cluster(tmp_path, postgres_url) as started:
        wait_for_the_balancer(started)
        yield started


def test_three_processes_behind_nginx_lose_nothing_when_one_is_killed(three_behind_nginx: Cluster):
    replies, victim = upload_all_at_once_and_kill_one(three_behind_nginx)
    outcome = every_reply_is_an_attempt_a_refusal_or_cut_off(replies)
    every_acknowledged_attempt_is_graded(three_behind_nginx, outcome)
    every_stored_attempt_is_graded_once_within_the_limit(three_behind_nginx, outcome)
    the_killed_processs_claims_went_back(three_behind_nginx, victim)
    every_student_is_counted(three_behind_nginx)
