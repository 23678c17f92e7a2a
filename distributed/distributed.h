// distributed/distributed.h — the distributed layer's public headers in one
// include (the repo-root lockstep.h includes it).
// Reading order: store.h -> rendezvous.h -> work.h -> process_group.h ->
// process_group_gloo.h / process_group_mpi.h / process_group_round_robin.h ->
// init.h -> distributed_data_parallel.h -> comm_hook.h -> comm_hooks/ -> ddp_join.h ->
// zero/ (ZeroRedundancyOptimizer).
#pragma once

#include "distributed/store.h"
#include "distributed/hash_store.h"
#include "distributed/file_store.h"
#include "distributed/tcp_store.h"
#include "distributed/prefix_store.h"
#include "distributed/rendezvous.h"

#include "distributed/work.h"
#include "distributed/process_group.h"
#include "distributed/process_group_gloo.h"
#include "distributed/process_group_mpi.h"
#include "distributed/process_group_round_robin.h"
#include "distributed/init.h"
#include "distributed/checkpoint.h"

#include "distributed/ddp_options.h"
#include "distributed/distributed_data_parallel.h"
#include "distributed/comm_hooks/default_hooks.h"
#include "distributed/comm_hooks/powersgd.h"
#include "distributed/comm_hooks/deterministic_hook.h"
#include "distributed/sync_batch_norm.h"
#include "distributed/zero/zero_redundancy_optimizer.h"
#include "distributed/zero/zero_overlap.h"
