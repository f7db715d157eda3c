"""The table of calls the lint knows: collectives, point-to-point, process groups, rank sources.

Extensible: :func:`extend` adds names (from ``[tool.hpc-hangkit.lint] collectives``).
A call is matched in one of three ways (see :func:`classify_call`):

- by its qualified name, when the receiver resolves through the module's imports
  (``dist.all_reduce`` with ``import torch.distributed as dist``): the module prefix
  must be one of :data:`COLLECTIVE_MODULES` (so ``torch.gather`` or ``functools.reduce``
  are never collectives);
- by a distinctive method name on any other receiver (``comm.Allreduce``,
  ``accelerator.wait_for_everyone``);
- by a generic method name (``barrier``, ``gather``, ``reduce``...) only when the
  receiver's name looks like a communicator (:data:`COMMISH`: ``comm``, ``strategy``,
  ``accelerator``...).

Stdlib only.
"""
import re

__all__ = ["COLLECTIVE_MODULES", "QUALIFIED", "DISTINCT", "GENERIC", "COMMISH", "P2P_SEND", "P2P_RECV",
           "GROUP_CREATE", "ABORTS", "EXITS", "RANK_CALLS", "RANK_NAMES", "RANK_ENV",
           "LOCAL_CALLS", "LOCAL_METHODS", "DATAISH", "CONFIG_RECEIVER", "MATRIX_RANK", "MARK_DECORATORS", "MEMBERSHIP",
           "EXTRA_PLAIN", "extend",
           "snapshot", "restore", "classify_call", "RANK_CALL_RE", "RANK_ATTR_RE", "LOCAL_DATA_METHODS",
           "LOCAL_DATA_CALLS", "DISPLAY_KEYWORDS", "is_display_keyword", "extend_rank_sources", "is_rank_call",
           "is_configured",
           "configured_method", "LIBRARY_METHODS", "SYNC_LOG_METHODS", "WRAPPER_CLASSES", "GATHERING_WRAPPERS", "SHARDING_CALLS", "is_rank_attr", "commish"]

#: qualified-name prefixes whose functions named in DISTINCT or GENERIC are collectives
COLLECTIVE_MODULES = ("torch.distributed", "mpi4py", "accelerate", "lightning", "pytorch_lightning",
                      "deepspeed", "horovod", "hpc_hangkit", "torch_xla", "mpi4jax")

#: collective method/function names distinctive enough to match on any receiver
DISTINCT = {
    # torch.distributed
    "all_reduce", "all_gather", "all_gather_object", "all_gather_into_tensor", "all_gather_coalesced",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "broadcast_object_list", "scatter_object_list", "gather_object", "monitored_barrier",
    "all_reduce_coalesced",
    # a DTensor's gather of its shards (FSDP2, tensor parallel): every rank of its mesh takes part
    "full_tensor",
    # mpi4py (upper case: buffer API; lower case: pickle API)
    "allreduce", "Allreduce", "Barrier", "bcast", "Bcast", "allgather", "Allgather", "Allgatherv",
    "alltoall", "Alltoall", "Alltoallv", "Reduce", "Reduce_scatter", "Reduce_scatter_block",
    "Gather", "Gatherv", "Scatter", "Scatterv", "Scan", "Exscan", "Ibarrier", "Iallreduce",
    # mpi4py: nonblocking (MPI-3: every rank must start them, in the same order), neighborhood,
    # collective file I/O, one-sided windows, communicator duplication and topologies
    "Ibcast", "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iallgather", "Iallgatherv", "Ialltoall",
    "Ialltoallv", "Ialltoallw", "Ireduce", "Ireduce_scatter", "Ireduce_scatter_block", "Iscan", "Iexscan",
    "Alltoallw", "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv",
    "Neighbor_alltoallw", "neighbor_allgather", "neighbor_alltoall",
    "Read_all", "Write_all", "Read_at_all", "Write_at_all", "Read_ordered", "Write_ordered", "Set_view",
    "Allocate_shared", "Fence", "Dup", "Create_cart", "Create_graph", "Create_dist_graph",
    "Create_dist_graph_adjacent", "Create_intercomm",
    # accelerate
    "wait_for_everyone", "gather_for_metrics", "pad_across_processes",
    # hpc_hangkit
    "ranks_agree",
}
#: collective names that are also ordinary names elsewhere: matched by module prefix, or on a
#: receiver that looks like a communicator
GENERIC = {"barrier", "broadcast", "gather", "scatter", "reduce", "scan", "exscan", "new_group",
           "new_subgroups", "new_subgroups_by_enumeration", "init_device_mesh", "init_process_group",
           "destroy_process_group", "Allocate", "rendezvous"}
#: a receiver name that looks like a communicator / strategy / accelerator
COMMISH = re.compile(r"(^|_)(comm|mpi|world|strategy|accelerator|dist|pg|process_group|group|fabric|"
                     r"trainer|backend|communicator|hvd|deepspeed)s?$|^comm|^COMM_|comm$", re.I)

#: library functions that are collective by their qualified name alone (every rank of the group
#: must call them): torch.distributed.checkpoint's save and load plan and finish across ranks
#: (reduce_scatter / all_gather of the plans, a barrier for the metadata), so ``dcp.save`` under
#: ``if rank == 0:`` hangs the others' next collective
QUALIFIED = {"torch.distributed.checkpoint." + n for n in (
    "save", "load", "async_save", "save_state_dict", "load_state_dict",
    "state_dict_saver.save", "state_dict_saver.async_save", "state_dict_saver.save_state_dict",
    "state_dict_loader.load", "state_dict_loader.load_state_dict")} | {
    # FSDP's static methods that gather or scatter the sharded state over the group (an
    # optimizer state dict gathered on rank 0 only hangs: Zero-to-Wan PR #1), and its
    # full-parameter context
    cls + "." + n for cls in ("torch.distributed.fsdp.FullyShardedDataParallel",
                              "torch.distributed.fsdp.fully_sharded_data_parallel.FullyShardedDataParallel")
    for n in ("optim_state_dict", "full_optim_state_dict", "sharded_optim_state_dict",
              "scatter_full_optim_state_dict", "optim_state_dict_to_load", "summon_full_params")}

#: library methods that are collective, matched on a receiver named like their owner:
#: ``accelerator.save_state`` (DeepSpeed/FSDP checkpoints synchronise), a DeepSpeed engine's
#: ``save_checkpoint``/``load_checkpoint`` (ZeRO shards, barriers inside), a Lightning or Composer
#: trainer's ``save_checkpoint`` (it ends in the strategy's barrier); the backward of accelerate,
#: a DeepSpeed engine, Lightning Fabric and a LightningModule's ``manual_backward``: the wrapped
#: model's gradients are all-reduced (DDP) or reduce-scattered (FSDP, ZeRO) in it, so a rank that
#: skips it (a NaN loss `continue`d past) leaves the others waiting
LIBRARY_METHODS = {
    "save_state": re.compile(r"(^|_)accelerator$", re.I),
    "load_state": re.compile(r"(^|_)accelerator$", re.I),
    "backward": re.compile(r"^_?(accelerator|engine|model_engine|ds_engine|deepspeed_engine|fabric)$", re.I),
    "manual_backward": re.compile(r"^self$"),
    "save_checkpoint": re.compile(r"(^|_)(engine|model_engine|ds_engine|deepspeed_engine|ds_model|trainer)$", re.I),
    "load_checkpoint": re.compile(r"(^|_)(engine|model_engine|ds_engine|deepspeed_engine|ds_model)$", re.I),
}
#: logging methods that reduce across processes when given ``sync_dist=True`` (Lightning)
SYNC_LOG_METHODS = {"log", "log_dict"}
#: module wrappers whose forward is collective (DDP broadcasts buffers, FSDP all-gathers parameters):
#: ``self.model = DDP(model)`` makes ``self.model(x)`` a collective
WRAPPER_CLASSES = {"DistributedDataParallel", "FullyShardedDataParallel", "DDP", "FSDP"}
#: of those, the ones whose ``state_dict()`` gathers the full state over the group (FSDP's
#: default ``FULL_STATE_DICT``): ``model.state_dict()`` on rank 0 alone waits for the others
GATHERING_WRAPPERS = {"FullyShardedDataParallel", "FSDP"}
#: FSDP2: ``fully_shard(model)`` shards the module in place; its forward all-gathers
SHARDING_CALLS = {"fully_shard"}

#: blocking point-to-point (never collectives: only the two ends take part)
P2P_SEND = {"send", "Send", "ssend", "Ssend"}
P2P_RECV = {"recv", "Recv"}
P2P_ALL = P2P_SEND | P2P_RECV | {"isend", "irecv", "Isend", "Irecv", "sendrecv", "Sendrecv", "batch_isend_irecv"}

#: process-group creation (collective over the parent group unless use_local_synchronization=True)
GROUP_CREATE = {"new_group", "new_subgroups", "new_subgroups_by_enumeration", "init_device_mesh"}

#: calls that end the job on every rank (a raise after one of them cannot strand the others)
ABORTS = {"Abort", "abort", "destroy_process_group", "_exit", "abort_process_group"}
#: calls that end this process: an early exit like ``return``
EXITS = {"sys.exit", "os._exit", "exit", "quit", "os.abort"}

#: calls whose value is the rank (any receiver)
RANK_CALLS = {"get_rank", "get_local_rank", "get_node_local_rank", "get_global_rank", "get_group_rank",
              "Get_rank", "get_process_index", "get_local_process_index", "get_dist_info",
              # torch_xla: xm.get_ordinal(), xr.global_ordinal(), ...
              "get_ordinal", "get_local_ordinal", "global_ordinal", "local_ordinal"}
#: a function whose name says it answers with the rank or a rank test (``get_rank_and_world_size``,
#: ``dist_rank``, ``rank_is_root``, ``is_main_process``, ``is_rank_zero``...)
RANK_CALL_RE = re.compile(r"^_*(get_\w*rank\w*|\w+_rank|rank|rank_is_\w+|(if_|on_)?main_process|"
                          r"is_(main|master|root_rank|rank_?(0|zero)|(global|world)_(main|master|primary)|"
                          r"global_zero|local_zero|local_main|leader|chief|first_rank|primary)\w*|"
                          r"(local_|global_)?rank_?(0|zero))$", re.I)
#: names matching RANK_CALL_RE that are not the process's rank (a matrix's rank, peers, sizes,
#: the number of a named member of a group: ``get_pipeline_model_parallel_last_rank()``)
NOT_RANK_RE = re.compile(r"matrix|lora|low_rank|^_*tensor_rank|sparse|src|dst|dest|peer|root_rank$|target|source|"
                         r"num|max|min|n_rank|nrank|to_rank|from_rank|warn|info|debug|print|log|only|"
                         r"_for_|^_*rank_(zero|0)_|ranks$|ranks_|^_*get_\w*_(first|last)_rank$", re.I)
#: attribute names that hold a rank test (``mpi.world.rank_is_root``)
RANK_ATTR_RE = re.compile(r"^(rank_is_\w+|is_(rank_?(0|zero)|root_rank|main_rank|master_rank)|"
                          r"is_(global|world)_(main|master|primary)(_process|_rank|_worker)?|"
                          r"(local|global|node|world|dist|my|proc|process|device|gpu)_rank)$")
#: names and attributes that hold the rank (``self.rank``, ``args.local_rank``, ``accelerator.is_main_process``)
RANK_NAMES = {"rank", "local_rank", "global_rank", "node_rank", "group_rank", "my_rank", "myrank", "rank_id",
              "world_rank", "proc_id", "procid", "process_index", "local_process_index", "is_main_process",
              "is_local_main_process", "is_rank_zero", "is_global_zero", "is_master", "is_main", "is_leader",
              "is_local_zero", "local_rank_zero", "rank_zero", "RANK", "LOCAL_RANK"}
#: environment variables that hold the rank
RANK_ENV = {"RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID",
            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
            "MPI_LOCALRANKID", "PALS_RANKID", "FLUX_TASK_RANK"}

#: qualified calls whose answer can differ between ranks without naming the rank
LOCAL_CALLS = {
    "os.path.exists", "os.path.isfile", "os.path.isdir", "os.path.lexists", "os.path.getsize",
    "os.path.getmtime", "os.listdir", "os.scandir", "os.stat", "os.access", "os.walk", "glob.glob", "glob.iglob",
    "time.time", "time.perf_counter", "time.monotonic", "time.time_ns", "time.process_time",
    "socket.gethostname", "platform.node", "shutil.disk_usage",
    "torch.cuda.memory_allocated",
    "torch.cuda.max_memory_allocated", "torch.cuda.memory_reserved", "torch.cuda.mem_get_info",
    "torch.rand", "torch.randn", "torch.randint", "torch.randperm",
}
#: prefixes of rank-local qualified calls (random without a shared seed)
LOCAL_PREFIXES = ("random.", "numpy.random.", "psutil.")
#: rank-local methods on any receiver (pathlib)
LOCAL_METHODS = {"exists", "is_file", "is_dir", "glob", "rglob", "iterdir"}
#: methods and calls whose value is this rank's part of something sharded (its size can differ between
#: ranks): DTensor/ShardedTensor local parts, a dataset shard, a DistributedSampler's indices
LOCAL_DATA_METHODS = {"to_local", "local_shards", "local_tensor", "local_chunks", "shard", "local_shard"}
LOCAL_DATA_CALLS = {"DistributedSampler", "split_dataset_by_node", "shard_dataset", "ElasticDistributedSampler"}
#: keyword arguments of a call that only shape its display (a progress bar, a logger): their rank
#: dependence does not reach the call's value (``tqdm(loader, disable=not is_rank_zero)``)
DISPLAY_KEYWORDS = {"disable", "desc", "position", "leave", "ncols", "nrows", "dynamic_ncols", "file", "verbose",
                    "unit", "unit_scale", "postfix", "bar_format", "colour", "color", "mininterval", "maxinterval",
                    "miniters", "smoothing", "ascii", "quiet", "silent", "enable", "enabled", "show",
                    "show_progress", "progress_bar", "logger", "log", "level", "flush", "end", "sep", "prefix",
                    "print_fn", "stacklevel", "main_process_only", "is_main_process", "in_order", "rank_zero_only",
                    # placement: where a value lives, not what it holds
                    "device", "device_ids", "output_device", "map_location", "dtype", "non_blocking"}
#: keyword arguments named for where logs go (`tensorboard_logdir=`, `wandb_project=`,
#: `azureml_logging=`: fairseq's progress bar gets them on the master only): display too
_LOG_KEYWORD = re.compile(
    r"(^|_)(log|logs|logdir|logging|logger|tensorboard|wandb|mlflow|azureml|aim|comet|clearml)(_|$)", re.I)


def is_display_keyword(name):
    """True when keyword argument ``name`` only shapes a call's display or where its logs go
    (:data:`DISPLAY_KEYWORDS`, a logging destination): its rank dependence does not reach the
    call's value."""
    return name in DISPLAY_KEYWORDS or bool(_LOG_KEYWORD.search(name))
#: names of per-rank data (their length / emptiness is rank-local)
#: (a loader's or a whole dataset's length is not: DistributedSampler & co. make it equal)
DATAISH = re.compile(r"(^|_)(batch|batches|shards|chunks|samples|files)$|^(local|my|rank)_(batch|shards?|chunks?|"
                     r"data|samples|files|items|rows)$|^my_\w*(list|tensors?|items|rows|total|count|elems|"
                     r"elements|numel|size|len)s?$", re.I)

#: receivers that hold a run's configuration (``args.files``, ``self.config.micro_batch``,
#: ``train_cfg.shards``): parsed alike on every rank from the same command line or file, so an
#: attribute of one named like data (:data:`DATAISH`) is a setting, not this rank's data
CONFIG_RECEIVER = re.compile(r"^(args|config|cfg|conf|opts?|options|hparams|settings|flags)$|"
                             r"_(args|config|cfg|conf|opts|options|hparams|settings)$", re.I)

#: receivers of a ``rank`` attribute that is a matrix's rank, a hyperparameter (``args.ds.lora.rank``,
#: ``peft_config.rank``, ``self.low_rank.rank``), not this process's number
MATRIX_RANK = re.compile(r"lora|adapter|peft|low_?rank|svd|tucker|factori[sz]", re.I)

#: a test of group membership: ranks outside a group skip its collectives by design
#: (and a branch taken only with use_local_synchronization, where non-members may skip)
MEMBERSHIP = re.compile(r"not_in_group|non_member|NON_GROUP_MEMBER|is_member|in_group|use_local_synchronization|"
                        r"rank_in_\w+_group$", re.I)

#: decorators that mark a user's function as collective
MARK_DECORATORS = {"collective", "hpc_hangkit.collective", "hpc_hangkit.arm.agree.collective",
                   "hpc_hangkit.arm.collective"}

#: decorators that run a function only on some ranks (its body is a rank branch): Lightning's
#: ``rank_zero_only``, mmengine's ``master_only``, accelerate's ``on_main_process`` family
RANK_GATES = {"rank_zero_only", "master_only", "on_main_process", "on_local_main_process", "on_last_process",
              "on_process", "on_local_process"}

_extra_qualified = set()
#: configured plain names: also matched as bare calls (``my_sync(t)``)
EXTRA_PLAIN = set()


def extend_rank_sources(names):
    """Add rank sources from the settings (``rank_sources = [...]``): each name (its last
    dotted part) is a call whose value is the rank and an attribute or name that holds it."""
    for n in names:
        n = str(n).strip().rsplit(".", 1)[-1]
        if n:
            RANK_CALLS.add(n)
            RANK_NAMES.add(n)


def is_rank_call(name):
    """True when a call named ``name`` (its last identifier) answers with the rank."""
    if name in RANK_CALLS:
        return True
    got = _RANK_CALL_HIT.get(name)
    if got is None:
        got = _RANK_CALL_HIT[name] = bool(RANK_CALL_RE.match(name)) and not NOT_RANK_RE.search(name)
    return got


def is_rank_attr(name):
    """True when an attribute ``name`` matches :data:`RANK_ATTR_RE` (remembered per name)."""
    got = _RANK_ATTR_HIT.get(name)
    if got is None:
        got = _RANK_ATTR_HIT[name] = bool(RANK_ATTR_RE.match(name))
    return got


def commish(name):
    """True when ``name`` looks like a communicator (:data:`COMMISH`; remembered per name)."""
    got = _COMMISH_HIT.get(name)
    if got is None:
        got = _COMMISH_HIT[name] = bool(COMMISH.search(name))
    return got


#: name -> what the constant patterns above answer for it: the lint asks them of the same few
#: thousand names hundreds of thousands of times
_RANK_CALL_HIT = {}
_RANK_ATTR_HIT = {}
_COMMISH_HIT = {}


def is_configured(qualified):
    """True when the settings name ``qualified`` as a collective."""
    return qualified in _extra_qualified


def configured_method(modname, qualname):
    """True when a tree function (module ``modname``, ``qualname`` such as ``Sharded.forward``)
    is named in the settings' collectives: by ``module.qualname`` or, for a method, by
    ``Class.method`` (any module)."""
    if not _extra_qualified:
        return False
    return (modname + "." + qualname) in _extra_qualified or ("." in qualname and qualname in _extra_qualified)


def extend(names):
    """Add collectives: each ``"pkg.mod.func"`` (matched by qualified name) or ``"method"``
    (matched as a distinctive name on any receiver). ``names``: iterable of str."""
    for n in names:
        n = str(n).strip()
        if not n:
            continue
        if "." in n:
            _extra_qualified.add(n)
        else:
            DISTINCT.add(n)
            EXTRA_PLAIN.add(n)


def snapshot():
    """The extensible sets as they are now (for :func:`restore`)."""
    return set(DISTINCT), set(EXTRA_PLAIN), set(_extra_qualified), set(RANK_CALLS), set(RANK_NAMES)


def restore(saved):
    """Put back what :func:`snapshot` returned (one lint run's ``extend`` does not outlive it)."""
    for live, old in zip((DISTINCT, EXTRA_PLAIN, _extra_qualified, RANK_CALLS, RANK_NAMES), saved):
        live.clear()
        live.update(old)


def _last(dotted):
    return dotted.rsplit(".", 1)[-1]


def classify_call(qualified, method, receiver):
    """What a call is, from what the model knows of it.

    ``qualified``: the dotted name resolved through the imports (``"torch.distributed.barrier"``)
    or None; ``method``: the called attribute / name (``"barrier"``); ``receiver``: the last
    identifier of the receiver (``"comm"`` for ``self.comm.barrier()``) or None.
    Returns ``"collective"``, ``"p2p"``, or None.
    """
    if qualified is not None:
        if qualified in _extra_qualified or qualified in QUALIFIED:
            return "collective"
        name = _last(qualified)
        if qualified.startswith(COLLECTIVE_MODULES):
            if name in DISTINCT or name in GENERIC:
                return "collective"
            if name in P2P_ALL:
                return "p2p"
        return None
    if method in DISTINCT:
        return "collective"
    lib = LIBRARY_METHODS.get(method)
    if lib is not None and receiver is not None and lib.search(receiver):
        return "collective"
    if receiver is not None and commish(receiver):
        if method in GENERIC:
            return "collective"
        if method in P2P_ALL:
            return "p2p"
    return None
