"""Who a loader process is, under each launcher: torchrun's RANK/WORLD_SIZE/LOCAL_RANK, Lightning's own launcher's
LOCAL_RANK/NODE_RANK/WORLD_SIZE (one node), srun's
SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID inside a job step (never in the batch script, which is one process
even when its job has many tasks), else rank 0 of 1."""

import pytest

from shard_loader.world import World, WorldError, resolve_world

LAUNCHERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK")
LAUNCHERS += ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_ID")


@pytest.fixture
def env(monkeypatch):
    for name in LAUNCHERS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_an_srun_task_is_its_slurm_rank_of_the_steps_tasks(env):
    for k, v in {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1"}.items():
        env.setenv(k, v)
    assert resolve_world() == World(3, 4, 1)
    env.setenv("SLURM_PROCID", "4")
    with pytest.raises(Exception, match="rank 4 is not in"):
        resolve_world()
    env.setenv("SLURM_NTASKS", "four")
    with pytest.raises(WorldError, match="SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID are unusable"):
        resolve_world()


def test_a_batch_script_is_one_process_whatever_its_jobs_task_count(env):
    env.setenv("SLURM_PROCID", "0")
    env.setenv("SLURM_NTASKS", "4")  # sbatch --ntasks=4 sets these in the batch script too; no step, no srun
    assert resolve_world() == World(0, 1)


def test_a_process_lightnings_launcher_started_is_its_local_rank_on_one_node(env):
    for k, v in {"LOCAL_RANK": "1", "NODE_RANK": "0", "WORLD_SIZE": "2"}.items():  # what `python train.py` gives rank 1
        env.setenv(k, v)
    assert resolve_world() == World(1, 2, 1)
    env.setenv("NODE_RANK", "1")  # on a second node its global rank needs the processes per node, which no variable has
    with pytest.raises(WorldError, match="NODE_RANK=1 without a global RANK: pass rank and world_size"):
        resolve_world()


def test_torchrun_under_srun_is_torchruns_world(env):
    for k, v in {
        "SLURM_STEP_ID": "0",
        "SLURM_PROCID": "1",
        "SLURM_NTASKS": "2",
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
    }.items():
        env.setenv(k, v)
    assert resolve_world() == World(5, 8, 1)


def test_given_ranks_win_and_keep_the_launchers_local_rank(env):
    for k, v in {"SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"}.items():
        env.setenv(k, v)
    assert resolve_world(0, 1) == World(0, 1, 1)
