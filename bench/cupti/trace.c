// A CUPTI injection library: loaded by the CUDA driver into any process started with
// CUDA_INJECTION64_PATH set to it, it records every kernel, memcpy and memset the GPU
// runs (graph replays included, with their graph and node ids) and appends one line
// per record to $CUPTI_TRACE_OUT:
//
//   kind  start_ns  end_ns  graph_id  graph_node_id  stream  grid  block  name_or_bytes
//
// It exists because nsys is not on the GPU machine and ncu crashed on our process
// (BENCHMARKS.md); bench/gpu.sh's trace section builds it there with the toolkit's
// CUPTI headers. A thread flushes the records four times a second: Go programs end
// with exit_group, so no exit handler would run. KERNEL_RECORD, MEMCPY_RECORD and
// MEMSET_RECORD name the newest record versions of the installed headers; NO_COPIES
// leaves copies and memsets out. With CUPTI_TRACE_API set it also records the host's
// CUDA driver and runtime calls (kind A and R, the thread in the stream column, the
// call's name last), to show what the host does between and before the GPU's work;
// CUPTI_TRACE_NO_KERNELS then leaves the GPU's records out.
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static FILE *out;

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 4 << 20;
  *buffer = aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, *size);
  *max_records = 0;
}

#ifndef NO_COPIES
// print_transfer writes one line for a memcpy (kind 'C') or memset ('S') record.
static void print_transfer(char kind, uint64_t start, uint64_t end, uint32_t graph, uint64_t node,
                           uint32_t stream, uint64_t bytes) {
  fprintf(out, "%c\t%llu\t%llu\t%u\t%llu\t%u\t-\t-\t%llu\n", kind, (unsigned long long)start,
          (unsigned long long)end, graph, (unsigned long long)node, stream, (unsigned long long)bytes);
}
#endif

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
  CUpti_Activity *r = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
    switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      KERNEL_RECORD *k = (KERNEL_RECORD *)r;
      fprintf(out, "K\t%llu\t%llu\t%u\t%llu\t%u\t%d,%d,%d\t%d,%d,%d\t%s\n",
              (unsigned long long)k->start, (unsigned long long)k->end, k->graphId,
              (unsigned long long)k->graphNodeId, k->streamId, k->gridX, k->gridY, k->gridZ,
              k->blockX, k->blockY, k->blockZ, k->name);
      break;
    }
#ifndef NO_COPIES
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      MEMCPY_RECORD *m = (MEMCPY_RECORD *)r;
      print_transfer('C', m->start, m->end, m->graphId, m->graphNodeId, m->streamId, m->bytes);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      MEMSET_RECORD *m = (MEMSET_RECORD *)r;
      print_transfer('S', m->start, m->end, m->graphId, m->graphNodeId, m->streamId, m->bytes);
      break;
    }
#endif
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)r;
      int driver = r->kind == CUPTI_ACTIVITY_KIND_DRIVER;
      const char *name = NULL;
      cuptiGetCallbackName(driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
      fprintf(out, "%c\t%llu\t%llu\t0\t0\t%u\t-\t-\t%s\n", driver ? 'A' : 'R', (unsigned long long)a->start,
              (unsigned long long)a->end, a->threadId, name ? name : "?");
      break;
    }
    default:
      break;
    }
  }
  fflush(out);
  free(buffer);
}

// flusher hands CUPTI's partly filled buffers over four times a second.
static void *flusher(void *arg) {
  for (;;) {
    usleep(250000);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  return arg;
}

int InitializeInjection(void) {
  const char *path = getenv("CUPTI_TRACE_OUT");
  out = fopen(path ? path : "cupti-trace.tsv", "a");
  if (out == NULL) {
    perror("cupti trace");
    return 0;
  }
  // CUPTI_TRACE_NO_KERNELS leaves kernels, copies and memsets out, for host calls
  // alone. Either kind of record slows graph launches on the host: the decoder's AR loop
  // ran at 306 tokens/s with kernel records, 313 with host calls alone and 400
  // untraced (runs AZ and BB in BENCHMARKS.md).
  int kernels = getenv("CUPTI_TRACE_NO_KERNELS") == NULL;
  if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
      (kernels && cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) ||
#ifndef NO_COPIES
      (kernels && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
                   cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS)) ||
#endif
      (getenv("CUPTI_TRACE_API") != NULL && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS ||
                                               cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS))) {
    fprintf(stderr, "cupti trace: could not enable activity records\n");
    return 0;
  }
  pthread_t t;
  pthread_create(&t, NULL, flusher, NULL);
  pthread_detach(t);
  return 1;
}
