// distributed/distributed.h — the distributed layer's public headers in one
// include (the repo-root lockstep.h includes it).
// Reading order: store/store.h -> rendezvous.h -> process_group/work.h ->
// process_group/process_group.h -> process_group/process_group_gloo.h (_mpi, _round_robin)
// -> init.h -> ddp/distributed_data_parallel.h -> ddp/comm_hook.h -> comm_hooks/ ->
// ddp/ddp_join.h ->
// zero/ (ZeroRedundancyOptimizer).
#pragma once

#include "distributed/store/store.h"
#include "distributed/store/hash_store.h"
#include "distributed/store/file_store.h"
#include "distributed/store/tcp_store.h"
#include "distributed/store/prefix_store.h"
#include "distributed/rendezvous.h"

#include "distributed/process_group/work.h"
#include "distributed/process_group/process_group.h"
#include "distributed/process_group/process_group_gloo.h"
#include "distributed/process_group/process_group_mpi.h"
#include "distributed/process_group/process_group_round_robin.h"
#include "distributed/init.h"
#include "distributed/checkpoint.h"

#include "distributed/ddp/ddp_options.h"
#include "distributed/ddp/distributed_data_parallel.h"
#include "distributed/comm_hooks/default_hooks.h"
#include "distributed/comm_hooks/powersgd.h"
#include "distributed/comm_hooks/deterministic_hook.h"
#include "distributed/ddp/sync_batch_norm.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
#include "distributed/zero/zero_overlap.h"
