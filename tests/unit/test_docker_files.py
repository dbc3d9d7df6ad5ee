"""docker/compose.yaml and docker/Dockerfile, checked without Docker or buildah.

The compose file is validated against the Compose Specification's schema (vendored:
tests/fixtures/compose-spec.SOURCE.md) by a small draft 2020-12 validator below (jsonschema is
not in the lock); every keyword the schema uses is implemented, and an unknown one fails the
test instead of being skipped. Then what the compose file names is held against the image and
the code: each container path exists in the image the Dockerfile builds (a static reading of
its stages: WORKDIR, VOLUME, COPY, `mkdir -p`, the venv), each port is the policy server's
default, each environment variable is one the code reads. `make docker-check` tests the same
paths in the built images.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path, PurePosixPath

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SCHEMA = REPO / "tests/fixtures/compose-spec.json"

_spec = importlib.util.spec_from_file_location("compose_facts", DOCKER / "compose_facts.py")
facts = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(facts)


# ---------------------------------------------------------------- a JSON-schema subset


class SchemaError(AssertionError):
    pass


ANNOTATIONS = {"$schema", "$id", "title", "description", "deprecated", "default", "format", "examples", "$comment"}
TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


class Validator:
    """Draft 2020-12, the keywords the compose schema uses. `check` returns the property names
    it evaluated (what unevaluatedProperties needs) and raises SchemaError with a JSON path."""

    KEYWORDS = {
        "$ref",
        "$defs",
        "type",
        "enum",
        "const",
        "pattern",
        "minimum",
        "maximum",
        "required",
        "items",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "allOf",
        "anyOf",
        "oneOf",
        "unevaluatedProperties",
    }

    def __init__(self, root: dict):
        self.root = root

    def resolve(self, ref: str) -> dict:
        if not ref.startswith("#/"):
            raise SchemaError(f"unsupported $ref {ref}")
        node = self.root
        for part in ref[2:].split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def check(self, value, schema, path: str = "$") -> set[str]:
        if schema is True:
            return set()
        if schema is False:
            raise SchemaError(f"{path}: not allowed")
        unknown = set(schema) - ANNOTATIONS - self.KEYWORDS
        if unknown:
            raise SchemaError(f"the validator does not implement {sorted(unknown)} (at {path})")
        evaluated: set[str] = set()
        if "$ref" in schema:
            evaluated |= self.check(value, self.resolve(schema["$ref"]), path)
        self._scalar(value, schema, path)
        if isinstance(value, list):
            for i, item in enumerate(value):
                if "items" in schema:
                    self.check(item, schema["items"], f"{path}[{i}]")
            seen = [json.dumps(v, sort_keys=True) for v in value]
            if schema.get("uniqueItems") and len(seen) != len(set(seen)):
                raise SchemaError(f"{path}: items are not unique")
        if isinstance(value, dict):
            evaluated |= self._object(value, schema, path)
        for sub in schema.get("allOf", []):
            evaluated |= self.check(value, sub, path)
        for keyword, wanted in (("anyOf", lambda n: n >= 1), ("oneOf", lambda n: n == 1)):
            if keyword in schema:
                passed = []
                for sub in schema[keyword]:
                    try:
                        passed.append(self.check(value, sub, path))
                    except SchemaError:
                        pass
                if not wanted(len(passed)):
                    raise SchemaError(f"{path}: {value!r} matches {len(passed)} of {keyword}")
                evaluated = evaluated.union(*passed)
        if "unevaluatedProperties" in schema and isinstance(value, dict):
            for key in sorted(set(value) - evaluated):
                self.check(value[key], schema["unevaluatedProperties"], f"{path}.{key}")
            evaluated = set(value)
        return evaluated

    @staticmethod
    def _scalar(value, schema, path: str) -> None:
        if "type" in schema:
            types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            if not any(TYPES[t](value) for t in types):
                raise SchemaError(f"{path}: {value!r} is not of type {types}")
        if "enum" in schema and value not in schema["enum"]:
            raise SchemaError(f"{path}: {value!r} not in {schema['enum']}")
        if "const" in schema and value != schema["const"]:
            raise SchemaError(f"{path}: {value!r} != {schema['const']!r}")
        if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
            raise SchemaError(f"{path}: {value!r} does not match {schema['pattern']}")
        if TYPES["number"](value):
            if value < schema.get("minimum", value) or value > schema.get("maximum", value):
                raise SchemaError(f"{path}: {value} outside [{schema.get('minimum')}, {schema.get('maximum')}]")

    def _object(self, value: dict, schema: dict, path: str) -> set[str]:
        missing = [k for k in schema.get("required", []) if k not in value]
        if missing:
            raise SchemaError(f"{path}: missing {missing}")
        done = set()
        for key, sub in schema.get("properties", {}).items():
            if key in value:
                self.check(value[key], sub, f"{path}.{key}")
                done.add(key)
        for pattern, sub in schema.get("patternProperties", {}).items():
            for key in value:
                if re.search(pattern, key):
                    self.check(value[key], sub, f"{path}.{key}")
                    done.add(key)
        if "additionalProperties" in schema:
            for key in sorted(set(value) - done):
                self.check(value[key], schema["additionalProperties"], f"{path}.{key}")
            done = set(value)
        return done


@pytest.fixture(scope="module")
def compose() -> dict:
    return facts.load()


@pytest.fixture(scope="module")
def validator() -> Validator:
    return Validator(json.loads(SCHEMA.read_text()))


def test_compose_file_follows_the_compose_spec(compose, validator):
    validator.check(compose, validator.root)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (lambda c: c["services"]["robot"].update(shm_sizee="512m"), "shm_sizee"),
        (lambda c: c["services"]["robot"].update(network_mode=["host"]), "network_mode"),
        (lambda c: c["services"]["robot"]["healthcheck"].update(intervall="30s"), "intervall"),
        (lambda c: c.update(volumes=[]), "volumes"),
    ],
)
def test_the_validator_refuses_what_the_spec_refuses(compose, validator, mutate, expected):
    broken = json.loads(json.dumps(compose))
    mutate(broken)
    with pytest.raises(SchemaError, match=expected):
        validator.check(broken, validator.root)


# ---------------------------------------------------------------- the Dockerfile, statically


def dockerfile_stages() -> dict[str, tuple[str, list[tuple[str, str]]]]:
    """stage name -> (FROM image or stage, [(INSTRUCTION, arguments)])."""
    text = re.sub(r"\\\n", " ", (DOCKER / "Dockerfile").read_text())
    stages: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current: list[tuple[str, str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        if op.upper() == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else f"stage{len(stages)}"
            current = []
            stages[name] = (words[0], current)
        elif stages:
            current.append((op.upper(), rest.strip()))
    return stages


def _args(rest: str) -> list[str]:
    return json.loads(rest) if rest.startswith("[") else shlex.split(rest)


def image_files(target: str) -> tuple[set[str], str, dict[str, str]]:
    """(absolute paths the stage creates, its final WORKDIR, its ENV), following FROM and COPY --from."""
    stages = dockerfile_stages()
    base, instructions = stages[target]
    if base in stages:
        created, workdir, env = image_files(base)
    else:
        created, workdir, env = {"/"}, "/", {}
    created, env = set(created), dict(env)

    def absolute(path: str) -> str:
        return str(PurePosixPath(workdir) / path)

    for op, rest in instructions:
        if op == "WORKDIR":
            workdir = absolute(rest)
            created.add(workdir)
        elif op == "VOLUME":
            created.update(_args(rest))
        elif op == "ENV":
            for key, value in re.findall(r"(\w+)=(\S+)", rest):
                env[key] = value.replace("$PATH", env.get("PATH", ""))
        elif op == "RUN":
            for group in re.findall(r"mkdir -p ((?:/\S+\s*)+)", rest):
                created.update(group.split())
            created.update(f"{venv}/bin/python" for venv in re.findall(r"-m venv (/\S+)", rest))
            created.update(f"/home/{user}" for user in re.findall(r"useradd --create-home .* (\w+)$", rest))
        elif op == "COPY":
            words = [w for w in _args(rest) if not w.startswith("--") or w.startswith("--from=")]
            source_stage = words.pop(0)[len("--from=") :] if words[0].startswith("--from=") else None
            *sources, dest = words
            dest_abs = absolute(dest)
            into_dir = dest.endswith("/") or len(sources) > 1
            for src in sources:
                target_root = f"{dest_abs}/{PurePosixPath(src).name}" if into_dir else dest_abs
                if source_stage is None:
                    local = REPO / src
                    assert local.exists(), f"COPY {src}: not in the repository"
                    created.add(target_root)
                    if local.is_dir():
                        created.update(f"{target_root}/{p.relative_to(local).as_posix()}" for p in local.rglob("*"))
                else:
                    inner, _, _ = image_files(source_stage)
                    created.update(target_root + p[len(src) :] for p in inner if p == src or p.startswith(src + "/"))
    # every parent of a created path exists too
    created |= {str(parent) for p in list(created) for parent in PurePosixPath(p).parents}
    return created, workdir, env


SERVICES = {"robot": "robot", "policy-server": "policy-server"}


def test_compose_targets_are_dockerfile_stages(compose):
    stages = dockerfile_stages()
    for name, service in compose["services"].items():
        assert service["build"]["target"] == SERVICES[name] and SERVICES[name] in stages
        assert service["build"]["dockerfile"] == "docker/Dockerfile"
        assert (DOCKER / service["build"]["context"]).resolve() == REPO


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_every_container_path_compose_names_exists_in_the_image(compose, service):
    spec = compose["services"][service]
    created, _, _ = image_files(SERVICES[service])
    missing = [p for p in facts.image_paths(spec) if p not in created]
    assert not missing, f"{service}: {missing} not in the image"
    folders = {str(PurePosixPath(p).parent) for p in facts.mounted_files(spec)}
    assert folders <= created


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_health_check_and_entrypoint_run_from_the_venv(compose, service):
    created, _, env = image_files(SERVICES[service])
    assert env["PATH"].split(":")[0] == "/opt/venv/bin" and "/opt/venv/bin/python" in created
    test = compose["services"][service]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    if test[2].endswith("probe_graph.py"):  # its Fast DDS profile lies beside it
        assert str(PurePosixPath(test[2]).with_name("fastdds_probe.xml")) in created


def test_final_images_run_as_the_non_root_user():
    stages = dockerfile_stages()
    for target in SERVICES.values():
        users = [rest for op, rest in stages[target][1] if op == "USER"]
        assert users and users[-1].split(":")[0] != "0", target
    assert dockerfile_stages()["python"][0] == "${BASE_IMAGE}"
    assert "ARG BASE_IMAGE=debian:bookworm-slim" in (DOCKER / "Dockerfile").read_text()


# ---------------------------------------------------------------- against the code


def test_ports_are_the_policy_servers(compose):
    from egomimic_policy.remote.client import RemoteConfig
    from egomimic_policy.remote.server import build_parser

    port = int(build_parser().get_default("bind").rsplit(":", 1)[1])
    assert int(RemoteConfig().address.rsplit(":", 1)[1]) == port
    robot, server = compose["services"]["robot"], compose["services"]["policy-server"]
    assert facts.tcp_ports(robot) == [port]  # policy:=tcp://<server>:port
    assert set(facts.tcp_ports(server)) == {port}  # --bind and the health check
    ((address, host_port, container_port),) = facts.published_ports(server)
    assert host_port == container_port == port
    assert server["ports"][0].startswith("${EGOMIMIC_SERVER_IP:-127.0.0.1}:")  # the address the robot uses
    assert "policy:=tcp://${EGOMIMIC_SERVER_IP:-127.0.0.1}:" in " ".join(robot["command"])
    expose = [rest for op, rest in dockerfile_stages()["policy-server"][1] if op == "EXPOSE"]
    assert expose == [str(port)]


def _code_strings() -> set[str]:
    """Every string literal of the project's code (what it can read from the environment)."""
    import ast

    out = set()
    for top in ("egomimic_hw", "egomimic_safety", "egomimic_policy", "egomimic_data", "launch", "ros2_ws"):
        for path in (REPO / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    out.add(node.value)
    return out


def test_environment_variables_are_read_by_the_code(compose):
    from egomimic_launch.environment import DDS_VARIABLES
    from egomimic_policy.checkpoints.cache import CACHE_DIR_ENV

    strings = _code_strings()
    for name, service in compose["services"].items():
        for variable in service.get("environment", {}):
            assert variable in strings, f"{name}: {variable} is read nowhere in the code"
            assert variable in (*DDS_VARIABLES, CACHE_DIR_ENV), variable
        if "EGOMIMIC_CACHE_DIR" in service.get("environment", {}):
            assert service["environment"]["EGOMIMIC_CACHE_DIR"] in facts.volume_targets(service)


def test_host_variables_are_documented():
    readme = (DOCKER / "README.md").read_text()
    header = (DOCKER / "compose.yaml").read_text().split("name:", 1)[0]
    for variable in facts.variables():
        assert variable in readme and variable in header, variable


def test_robot_service_is_what_the_robot_needs(compose):
    robot = compose["services"]["robot"]
    assert robot["network_mode"] == "host" and robot["shm_size"] == "512m"
    assert robot["environment"]["ROS_AUTOMATIC_DISCOVERY_RANGE"] in ("LOCALHOST", "SUBNET")
    assert "/dev/bus/usb:/dev/bus/usb" in [d.split(" ")[0] for d in robot["devices"]]
    targets = facts.volume_targets(robot)
    assert {"/data/episodes", "/data/bags"} <= set(targets)
    assert any(v.endswith(":/checkpoints:ro") for v in robot["volumes"])
    assert "backend:=arx5" in robot["command"]
    for arg in ("record_dir", "bag_dir"):
        (value,) = [w.split(":=")[1] for w in robot["command"] if w.startswith(f"{arg}:=")]
        assert value in targets


def test_policy_server_reserves_a_gpu_and_reads_checkpoints_read_only(compose):
    server = compose["services"]["policy-server"]
    (device,) = server["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"]
    assert any(v.endswith(":/checkpoints:ro") for v in server["volumes"])
    assert any(v.endswith(":/keys:ro") for v in server["volumes"])


# ---------------------------------------------------------------- versions: one source


def _lock() -> dict[str, str]:
    pins = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version.strip()
    return pins


def _requirements(name: str) -> list[str]:
    lines = (DOCKER / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def test_server_requirements_are_unpinned_names_of_the_lock():
    lock = _lock()
    for requirement in _requirements("requirements-server.txt"):
        assert re.fullmatch(r"[A-Za-z0-9_.-]+", requirement), f"{requirement}: versions come from the lock"
        assert re.sub(r"[-_.]+", "-", requirement).lower() in lock, requirement


def test_robot_extras_are_pinned_to_what_the_code_names():
    (realsense,) = _requirements("requirements-robot.txt")
    name, version = realsense.split("==")
    assert name == "pyrealsense2" and name not in _lock()
    named = re.search(r"pyrealsense2==([\d.]+)", (REPO / "egomimic_hw/cameras/realsense.py").read_text())
    assert version.startswith(named.group(1) + ".") or version == named.group(1)


def test_the_lock_is_what_the_images_install():
    text = (DOCKER / "Dockerfile").read_text()
    assert "-r requirements.lock -r docker/requirements-robot.txt" in text
    assert "-c requirements.lock -r docker/requirements-server.txt" in text
    assert text.count("--no-index") >= 4  # offline: the wheelhouse only


def test_caches_are_ignored_by_git():
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert "wheelhouse/" in ignored
