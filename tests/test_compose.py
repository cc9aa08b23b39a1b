"""docker-compose.yml, docker-compose.worker.yml and the Dockerfile, checked by structure (no Docker engine runs in CI)."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
import yaml

from ntklab.config.settings import Settings
from ntklab.workers.main import worker_argv

REPO = Path(__file__).resolve().parents[1]
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
COMPOSE = yaml.safe_load(COMPOSE_TEXT)
SERVICES = COMPOSE["services"]
APP_SERVICES = ("migrate", "api", "worker", "worker-cpu")
WORKER_COMPOSE_TEXT = (REPO / "docker-compose.worker.yml").read_text()
WORKER_SERVICES = yaml.safe_load(WORKER_COMPOSE_TEXT)["services"]
INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?P<rest>[^}]*)\}")


def test_the_lab_services_are_all_there():
    assert {"postgres", "redis", "migrate", "api", "worker", "worker-cpu", "flower"} <= SERVICES.keys()
    assert SERVICES["worker-cpu"]["profiles"] == ["cpu"] and SERVICES["flower"]["profiles"] == ["flower"]
    assert all("profiles" not in SERVICES[name] for name in ("postgres", "redis", "migrate", "api", "worker"))


@pytest.mark.parametrize("name", ["postgres", "redis", "api"])
def test_servers_have_healthchecks(name):
    check = SERVICES[name]["healthcheck"]
    assert check["test"][0] in ("CMD", "CMD-SHELL") and len(check["test"]) > 1
    assert check["retries"] >= 3


@pytest.mark.parametrize("name", ["api", "worker", "worker-cpu"])
def test_the_app_starts_after_healthy_servers_and_a_finished_migration(name):
    assert SERVICES[name]["depends_on"] == {
        "postgres": {"condition": "service_healthy"},
        "redis": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }


def test_migrate_runs_the_packaged_migrations_once_after_postgres_is_healthy():
    migrate = SERVICES["migrate"]
    assert migrate["command"] == ["ntklab", "migrate"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"] == {"condition": "service_healthy"}


def test_the_gpu_worker_reserves_one_gpu_and_runs_one_job_at_a_time_on_the_api_queue():
    worker = SERVICES["worker"]
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and device["count"] == 1 and device["capabilities"] == ["gpu"]
    for name in ("worker", "worker-cpu"):
        command = SERVICES[name]["command"]
        assert command[:2] == ["ntklab", "worker"] and "-Q" not in command and "--concurrency" not in " ".join(command)
        settings = Settings(queue=SERVICES[name]["environment"]["NTKLAB_QUEUE"])
        argv = worker_argv(settings, command[2:])
        assert argv[0] == "worker" and "--concurrency=1" in argv
        assert argv[argv.index("-Q") + 1] == SERVICES[name]["environment"]["NTKLAB_QUEUE"]
    assert "deploy" not in SERVICES["worker-cpu"]


def test_the_commands_name_real_modules():
    command = SERVICES["api"]["command"]
    assert command[:3] == ["uvicorn", "--factory", "ntklab.service.app:create_app"]
    assert callable(importlib.import_module("ntklab.service.app").create_app)
    assert importlib.util.find_spec("ntklab.workers.main") is not None


def test_auth_is_on_and_every_setting_the_app_gets_is_a_real_one():
    fields = Settings.model_fields
    for name in APP_SERVICES:
        environment = SERVICES[name]["environment"]
        assert environment["NTKLAB_AUTH"] == "on"
        for variable in environment:
            assert variable.startswith("NTKLAB_") and variable.removeprefix("NTKLAB_").lower() in fields, variable
    assert environment["NTKLAB_DATABASE_URL"].startswith("postgresql+psycopg://")
    assert environment["NTKLAB_BROKER_URL"].startswith("redis://")


def test_secrets_have_no_defaults():
    secrets = [m for m in INTERPOLATION.finditer(COMPOSE_TEXT) if re.search("PASSWORD|SECRET|AUTH", m["name"])]
    assert {m["name"] for m in secrets} == {"POSTGRES_PASSWORD", "REDIS_PASSWORD", "FLOWER_BASIC_AUTH"}
    for match in secrets:
        assert match["rest"].startswith(":?"), f"${{{match['name']}{match['rest']}}} must be required, not defaulted"
    assert SERVICES["postgres"]["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")
    assert not re.search(r"postgres(ql)?(\+\w+)?://\w+:\w+@", COMPOSE_TEXT), "a literal password in a database URL"


def test_the_dockerfile_picks_torch_by_build_argument():
    dockerfile = (REPO / "Dockerfile").read_text()
    assert re.search(r"^ARG TORCH_VARIANT=cpu$", dockerfile, re.M)
    assert "https://download.pytorch.org/whl/${TORCH_VARIANT}" in dockerfile
    assert SERVICES["api"]["build"]["args"]["TORCH_VARIANT"].startswith("${TORCH_VARIANT:-cu12")


def test_the_worker_only_file_runs_the_lab_workers_and_nothing_else():
    assert WORKER_SERVICES.keys() == {"worker", "worker-cpu"}
    for name, worker in WORKER_SERVICES.items():
        lab = SERVICES[name]
        same = ("image", "build", "command", "deploy", "profiles", "stop_grace_period", "restart")
        assert {key: worker.get(key) for key in same} == {key: lab.get(key) for key in same}, name
        assert "depends_on" not in worker, "the servers run on the lab server, not here"
        assert worker["environment"]["NTKLAB_QUEUE"] == lab["environment"]["NTKLAB_QUEUE"]
        for variable in worker["environment"]:
            assert variable.startswith("NTKLAB_") and variable.removeprefix("NTKLAB_").lower() in Settings.model_fields


def test_the_worker_only_file_takes_the_server_urls_from_the_environment_without_defaults():
    environment = WORKER_SERVICES["worker"]["environment"]
    for variable in ("NTKLAB_DATABASE_URL", "NTKLAB_BROKER_URL"):
        (match,) = INTERPOLATION.finditer(environment[variable])
        assert match["name"] == variable and match["rest"].startswith(":?"), f"{variable} must be required"
    assert not re.search(r"(postgres(ql)?(\+\w+)?|redis)://\w*:\w+@", WORKER_COMPOSE_TEXT), "a literal password"
