"""A real Spark standalone cluster on loopback, from the installed pyspark: one master, two
workers (``spark-class org.apache.spark.deploy.master.Master`` / ``...worker.Worker``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import pyspark

SPARK_CLASS = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StandaloneCluster:
    def __init__(self, workers: int = 2, cores: int = 1, memory: str = "1g"):
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui = _free_port(), _free_port()
        self.dir = tempfile.mkdtemp(prefix="ks-cluster-")
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen:
        env = dict(
            os.environ,
            SPARK_HOME=os.path.dirname(pyspark.__file__),
            SPARK_WORKER_DIR=os.path.join(self.dir, name),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_NO_DAEMONIZE="1",
        )
        log = open(os.path.join(self.dir, f"{name}.log"), "w")
        p = subprocess.Popen(
            [SPARK_CLASS, *args], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs.append(p)
        return p

    def alive_workers(self) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=2) as r:
                return int(json.load(r).get("aliveworkers", 0))
        except OSError:
            return 0

    def applications(self) -> list[str]:
        """Names of the applications the master has seen (running or completed)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            state = json.load(r)
        return [a["name"] for a in state.get("activeapps", []) + state.get("completedapps", [])]

    def _spawn_worker(self, i: int) -> subprocess.Popen:
        return self._spawn(
            f"worker{i}-{len(self.procs)}",
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            "127.0.0.1",
            "--cores",
            str(self.cores),
            "--memory",
            self.memory,
            "--webui-port",
            "0",
            self.url,
        )

    def _wait_for_workers(self, timeout: float) -> None:
        deadline = time.time() + timeout
        while self.alive_workers() < self.n_workers:
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"standalone cluster did not come up in {timeout:.0f} s; logs in {self.dir}")
            time.sleep(1)

    def start(self, timeout: float = 120) -> StandaloneCluster:
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(self.ui),
        )
        self.workers = [self._spawn_worker(i) for i in range(self.n_workers)]
        self._wait_for_workers(timeout)
        return self

    def kill_worker(self, i: int = 0) -> None:
        os.killpg(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait()

    def restart_worker(self, i: int = 0, timeout: float = 120) -> None:
        """A fresh worker in place of a killed one, once the master counts it alive."""
        before = self._alive_ids()
        self.workers[i] = self._spawn_worker(i)
        deadline = time.time() + timeout
        while time.time() < deadline:
            alive = self._alive_ids()
            if alive - before and len(alive) == self.n_workers:
                return
            time.sleep(1)
        raise RuntimeError(f"worker {i} did not come back in {timeout:.0f} s; logs in {self.dir}")

    def _alive_ids(self) -> set[str]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui}/json/", timeout=5) as r:
            return {w["id"] for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE"}

    def stop(self) -> None:
        for p in reversed(self.procs):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=20)
        shutil.rmtree(self.dir, ignore_errors=True)  # logs and executors' work dirs
