"""The Kubernetes manifests (autograder/k8s-*.yaml) are what a cluster accepts, validated offline against the
Kubernetes schemas (kubernetes-validate carries them), and they agree with the image's entry point: every
`autograd-course` command in them is one our CLI parses, the probes ask a route the service has, and the
grading Job's shards, its completions and the merge agree."""

from __future__ import annotations

import re
import shlex
import tomllib

import kubernetes_validate
import pytest
import yaml

from course.cli import _parser
from course.platforms.service.app import ROUTES
from tests.support.helpers import ROOT

MANIFESTS = sorted((ROOT / "autograder").glob("k8s-*.yaml"))
VERSIONS = ("1.30.0", kubernetes_validate.latest_version())  # an older cluster still in service, and the newest
IMAGE = "autograd-course-grader:latest"


def _documents() -> list[tuple[str, dict]]:
    return [(path.name, doc) for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def _containers(doc: dict) -> list[dict]:
    spec = doc["spec"]["template"]["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def _autograd_course_argv(container: dict) -> list[str] | None:
    """The arguments our CLI is given (None: the container runs something else), shell words resolved."""
    command = [*container.get("command", []), *container.get("args", [])]
    if command[:2] == ["sh", "-c"]:
        line = re.sub(r'"\$\(\(JOB_COMPLETION_INDEX \+ 1\)\)', '"1', command[2]).replace("$JOB_COMPLETION_INDEX", "0")
        command = shlex.split(line.removeprefix("exec "))
    return command[1:] if command and command[0] == "autograd-course" else None


def test_the_manifests_validate_against_the_kubernetes_schemas():
    assert {path.name for path in MANIFESTS} == {"k8s-job.yaml", "k8s-serve.yaml"}
    kinds = sorted(doc["kind"] for _, doc in _documents())
    assert kinds == ["Deployment", "Job", "Job", "Service"]
    for _, doc in _documents():
        for version in VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)  # raises, saying where, on a bad field
    deployment = next(doc for _, doc in _documents() if doc["kind"] == "Deployment")
    misspelt = {**deployment, "spec": {**deployment["spec"], "replica": 3}}
    with pytest.raises(kubernetes_validate.ValidationError):  # the check can fail: a misspelt field is caught
        kubernetes_validate.validate(misspelt, VERSIONS[-1], strict=True)


def test_the_manifests_run_the_images_own_entry_point_with_arguments_it_parses():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "autograd-course" in scripts  # the image's `pip install .` puts it on the PATH
    ran = []
    for name, doc in _documents():
        if doc["kind"] == "Service":
            continue
        for container in _containers(doc):
            if container["image"] != IMAGE:
                continue
            argv = _autograd_course_argv(container)
            assert argv is not None, (name, container["name"])
            args = _parser().parse_args(argv)  # SystemExit (and argparse's message) on an option we do not have
            ran.append(args.command)
            grades = args.command in ("serve", "grade")
            granted = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
            assert sorted(granted) == (["NET_ADMIN", "SYS_ADMIN"] if grades else []), (name, container["name"])
    assert sorted(ran) == ["grade", "merge", "serve"]


def test_the_service_probes_ask_a_route_the_service_answers_on_its_port():
    deployment = next(doc for _, doc in _documents() if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    args = _parser().parse_args(_autograd_course_argv(container))
    assert args.database is None  # the URL comes from the Secret through the environment, not the command line
    assert container["env"][0]["name"] == "AUTOGRAD_SERVICE_DATABASE"
    assert "secretKeyRef" in container["env"][0]["valueFrom"]
    assert container["ports"][0]["containerPort"] == args.port
    paths = {route.path for route in ROUTES}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in paths, probe
        assert container[probe]["httpGet"]["port"] == container["ports"][0]["name"]


def test_the_grading_jobs_shards_completions_and_merge_agree():
    grade, merge = (doc for _, doc in _documents() if doc["kind"] == "Job")
    shards = grade["spec"]["completions"]
    assert grade["spec"]["completionMode"] == "Indexed"
    assert grade["spec"]["parallelism"] == shards
    line = grade["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert f'--shard "$((JOB_COMPLETION_INDEX + 1))/{shards}"' in line
    outs = [f"/course/shards/{index}" for index in range(shards)]
    merged = _parser().parse_args(_autograd_course_argv(merge["spec"]["template"]["spec"]["containers"][0]))
    assert [str(path) for path in merged.outs] == outs
    waits = merge["spec"]["template"]["spec"]["initContainers"][0]["args"][0]
    assert f"for index in {' '.join(map(str, range(shards)))};" in waits
