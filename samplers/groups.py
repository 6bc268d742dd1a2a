"""Which ranks a sampler shards over: the default process group, a ProcessGroup or a 1-D mesh.

In a job that combines data parallelism with tensor, context or pipeline parallelism, the
ranks of one tensor-parallel (or context-parallel) group are *replicas*: they must read the
same samples, and only the data-parallel ranks must read disjoint ones. A sampler built
with the defaults shards over every process of the job, so on a 2 x 2 mesh it makes four
shards and gives tensor-parallel peers different samples, silently. Pass the
data-parallel group instead: ``group=mesh["dp"]`` (a 1-D ``DeviceMesh``), several
dimensions flattened into one (``mesh["dp", "cp"]._flatten()``), or a ``ProcessGroup``
such as Megatron's data-parallel group. ``num_replicas`` and ``rank`` then come from that
group.

:func:`placement` turns the constructor's ``num_replicas``, ``rank`` and ``group`` into the
validated world size and rank; :class:`GroupRef` is what a sampler keeps to run its later
collectives (``check_consistent``) over the same group.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from samplers import checks

if TYPE_CHECKING:
    from typing import TypeAlias

    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh

    #: What a sampler's ``group=`` takes.
    Group: TypeAlias = "ProcessGroup | DeviceMesh | GroupRef | None"
else:
    Group = Any

__all__ = ["DEFAULT_GROUP", "GroupRef", "global_ranks", "placement", "reference"]


class GroupRef:
    """The process group a sampler shards over, remembered for its later collectives.

    Guarantee: :attr:`process_group` is the group it was made from (``None`` for the
    default group, whichever that is when asked), and :attr:`ranks` that group's global
    ranks in group-rank order. A copy (``copy``/``deepcopy``) is this same reference, never
    a new group; a pickled reference names its group by name and ranks, and resolves to the
    group of that name and those ranks in the process that uses it (or raises, saying to
    build the sampler there with ``group=``).
    """

    __slots__ = ("_group", "_name", "_ranks")

    def __init__(
        self,
        group: ProcessGroup | None = None,
        *,
        name: str | None = None,
        ranks: tuple[int, ...] | None = None,
    ) -> None:
        self._group = group
        if group is not None:
            name = str(getattr(group, "group_name", "") or "unnamed")
            ranks = tuple(dist.get_process_group_ranks(group))
        self._name = name
        self._ranks = ranks

    @property
    def is_default(self) -> bool:
        """Whether this is the default process group (``group=None``)."""
        return self._name is None

    @property
    def process_group(self) -> ProcessGroup | None:
        """The group, as collectives take it (``None``: the default group)."""
        if self._name is None or self._group is not None:
            return self._group
        resolve = getattr(dist.distributed_c10d, "_resolve_process_group", None)
        found: ProcessGroup | None = None
        if resolve is not None and dist.is_available() and dist.is_initialized():
            try:
                found = resolve(self._name)
            except (RuntimeError, ValueError, KeyError):
                found = None
        if found is None or tuple(dist.get_process_group_ranks(found)) != self._ranks:
            raise RuntimeError(
                f"the sampler's process group (global ranks {list(self._ranks or ())}) does "
                "not exist in this process: it was copied here by pickle; build the sampler "
                "in this process with group= one of its own groups"
            )
        self._group = found
        return found

    @property
    def ranks(self) -> tuple[int, ...] | None:
        """The group's global ranks in group-rank order; the default group's when it exists,
        else ``None``."""
        if self._name is not None:
            return self._ranks
        if dist.is_available() and dist.is_initialized():
            return tuple(range(dist.get_world_size()))
        return None

    def __copy__(self) -> GroupRef:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> GroupRef:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restored, (self._name, self._ranks))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, GroupRef):
            return NotImplemented
        return (self._name, self._ranks) == (other._name, other._ranks)

    def __hash__(self) -> int:
        return hash((self._name, self._ranks))

    def __repr__(self) -> str:
        if self._name is None:
            return "GroupRef(default process group)"
        return f"GroupRef(global ranks {list(self._ranks or ())})"


def _restored(name: str | None, ranks: tuple[int, ...] | None) -> GroupRef:
    """A reference unpickled: resolved to its group when it is first used."""
    return DEFAULT_GROUP if name is None else GroupRef(name=name, ranks=ranks)


#: The default process group (``group=None``), as the stock sampler reads it.
DEFAULT_GROUP = GroupRef()


def reference(group: Any) -> GroupRef:
    """``group`` (``None``, a ``ProcessGroup``, a 1-D ``DeviceMesh`` or a :class:`GroupRef`)
    as a :class:`GroupRef`; anything else raises, saying what to pass."""
    if group is None:
        return DEFAULT_GROUP
    if isinstance(group, GroupRef):
        return group
    mesh_module = sys.modules.get("torch.distributed.device_mesh")
    mesh_type = getattr(mesh_module, "DeviceMesh", None)
    if isinstance(mesh_type, type) and isinstance(group, mesh_type):
        return GroupRef(_mesh_group(group))
    non_member = getattr(getattr(dist, "GroupMember", None), "NON_GROUP_MEMBER", None)
    if type(group) is int and group == non_member:
        raise ValueError(
            f"group is GroupMember.NON_GROUP_MEMBER ({group!r}): torch.distributed.new_group "
            "returns it on processes outside the new group; build the sampler only on the "
            "group's processes, or pass the group this process belongs to"
        )
    if dist.is_available() and isinstance(group, dist.ProcessGroup):
        return GroupRef(group)
    raise TypeError(
        "group must be None (the default process group), a ProcessGroup or a 1-D "
        f"DeviceMesh (e.g. mesh['dp']), got {type(group).__name__} {group!r}"
    )


def _mesh_group(mesh: Any) -> ProcessGroup:
    """The process group of a 1-D mesh; a mesh of more dimensions says what to pass."""
    if mesh.ndim != 1:
        names = mesh.mesh_dim_names
        if names:
            example = (
                f": pass the data-parallel dimension alone, e.g. group=mesh[{names[0]!r}], or "
                "the dimensions that shard the data flattened into one (data and context "
                "parallelism: mesh['dp', 'cp']._flatten())"
            )
            shape = f"{mesh.ndim}-D DeviceMesh with dimensions {tuple(names)}"
        else:
            example = (
                ": pass the data-parallel dimension alone (build the mesh with "
                "mesh_dim_names and pass e.g. mesh['dp'])"
            )
            shape = f"{mesh.ndim}-D DeviceMesh without dimension names"
        raise ValueError(
            f"group is a {shape} of shape {tuple(mesh.shape)}; a sampler shards over one "
            f"group{example}"
        )
    group: ProcessGroup = mesh.get_group()
    return group


def global_ranks(group: GroupRef) -> list[int]:
    """The group's global ranks in group-rank order (needs an initialised process group)."""
    ranks = group.ranks
    if ranks is None:
        raise RuntimeError("the default process group is not initialised")
    return list(ranks)


def placement(num_replicas: Any, rank: Any, group: Any = None) -> tuple[int, int]:
    """Validated ``(num_replicas, rank)`` for a sampler that shards over ``group``.

    With ``group=None`` (the default process group), as the stock sampler: each ``None``
    is read from the default group, explicit values are taken as given. With a
    ``ProcessGroup`` or a 1-D ``DeviceMesh``, both come from that group; explicit values
    must agree with it, else a ``ValueError`` names both.
    """
    ref = reference(group)
    if ref.is_default:
        size = checks.world_size(
            _from_default_group("num_replicas", "get_world_size")
            if num_replicas is None
            else num_replicas
        )
        given = _from_default_group("rank", "get_rank") if rank is None else rank
        return size, checks.rank(given, size)
    process_group = ref.process_group
    members = global_ranks(ref)
    size = dist.get_world_size(process_group)
    own = dist.get_rank(process_group)
    if own < 0:
        raise ValueError(
            f"this process (global rank {dist.get_rank()}) is not a member of group (global "
            f"ranks {members}): build the sampler only on the group's processes, or pass the "
            "group this process belongs to"
        )
    if num_replicas is not None:
        stated = checks.world_size(num_replicas)
        if stated != size:
            raise ValueError(
                f"num_replicas={stated} disagrees with group, which has {size} ranks (global "
                f"ranks {members}): leave num_replicas out, it comes from group"
            )
    if rank is not None:
        stated = checks.as_int("rank", rank, error=checks.IntegerTypeError)
        if stated != own:
            raise ValueError(
                f"rank={stated} disagrees with group: this process is rank {own} of the group "
                f"(global ranks {members}); leave rank out, it comes from group"
            )
    return size, own


def _from_default_group(name: str, reader: str) -> int:
    """``num_replicas`` or ``rank`` from the default process group, or a clear error.

    The messages start with the stock ones (``Requires distributed package to be
    available``, torch's ``Default process group has not been initialized, ...``).
    """
    if not dist.is_available():
        raise RuntimeError(
            f"Requires distributed package to be available: {name} was not given and "
            "torch.distributed is not available in this build"
        )
    if not dist.is_initialized():
        raise ValueError(
            "Default process group has not been initialized, please make sure to call "
            f"init_process_group. ({name} was not given, so it is read from the default "
            "process group: pass num_replicas and rank, or call "
            "torch.distributed.init_process_group first)"
        )
    return int(getattr(dist, reader)())
