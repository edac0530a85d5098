/* tessel collectives: a C API shaped like NCCL's, so that code written against NCCL ports by
 * renaming (nccl -> tessel). Result codes, data types and reduction operators have NCCL's names
 * and numeric values.
 *
 *   tesselUniqueId id;                      // rank 0 makes it and hands it to the others
 *   if (rank == 0) tesselGetUniqueId(&id);
 *   tesselComm_t comm;
 *   tesselCommInitRank(&comm, nranks, id, rank);
 *   tesselStream_t stream;
 *   tesselStreamCreate(&stream);
 *   tesselAllReduce(send, recv, count, tesselFloat32, tesselSum, comm, stream);  // returns at once
 *   tesselStreamSynchronize(stream);        // waits; reports a failure of any call on the stream
 *   tesselCommDestroy(comm);
 *
 * Calls are asynchronous. On the CPU backends (shm, mpi) a stream is an ordered queue: a call is
 * handed to the communicator's progress thread and runs after every earlier call on the same
 * stream; tesselStreamSynchronize / tesselEventSynchronize wait. On the nccl backend a stream
 * wraps a CUDA stream (tesselStreamCreateFromCuda) and buffers are device memory. A NULL stream is
 * one process-wide default stream.
 *
 * A communicator whose peer died, stopped answering, or made a call that does not match this
 * rank's call fails that call and every later one with tesselRemoteError or tesselInvalidUsage;
 * tesselGetLastError(comm) says what happened and which rank. Timeouts come from the config
 * (tesselCommInitRankConfig) or from TESSEL_COMM_TIMEOUT (seconds).
 */
#ifndef TESSEL_DIST_TESSEL_COMM_H_
#define TESSEL_DIST_TESSEL_COMM_H_

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TESSEL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[TESSEL_UNIQUE_ID_BYTES];
} tesselUniqueId;

typedef struct tesselComm* tesselComm_t;
typedef struct tesselStream* tesselStream_t;
typedef struct tesselEvent* tesselEvent_t;

typedef enum {
  tesselSuccess = 0,
  tesselUnhandledCudaError = 1,
  tesselSystemError = 2,
  tesselInternalError = 3,
  tesselInvalidArgument = 4,
  tesselInvalidUsage = 5,
  tesselRemoteError = 6,
  tesselInProgress = 7,
  tesselNumResults = 8
} tesselResult_t;

typedef enum {
  tesselInt8 = 0,
  tesselChar = 0,
  tesselUint8 = 1,
  tesselInt32 = 2,
  tesselInt = 2,
  tesselUint32 = 3,
  tesselInt64 = 4,
  tesselUint64 = 5,
  tesselFloat16 = 6,
  tesselHalf = 6,
  tesselFloat32 = 7,
  tesselFloat = 7,
  tesselFloat64 = 8,
  tesselDouble = 8,
  tesselBfloat16 = 9,
  tesselNumTypes = 10
} tesselDataType_t;

typedef enum {
  tesselSum = 0,
  tesselProd = 1,
  tesselMax = 2,
  tesselMin = 3,
  tesselAvg = 4,
  tesselNumOps = 5
} tesselRedOp_t;

/* Which engine moves the data. tesselBackendDefault reads TESSEL_BACKEND (shm, mpi, nccl) and
 * falls back to shm. */
typedef enum {
  tesselBackendDefault = 0,
  tesselBackendShm = 1,
  tesselBackendMpi = 2,
  tesselBackendNccl = 3
} tesselBackend_t;

/* Options for tesselCommInitRankConfig; start from TESSEL_CONFIG_INITIALIZER. A field left at -1
 * (or tesselBackendDefault) takes its value from the environment, then from the built-in default.
 */
typedef struct {
  size_t size; /* sizeof(tesselConfig_t), for forward compatibility */
  tesselBackend_t backend;
  /* Seconds after which a peer that neither answers nor can be seen alive is declared dead, and
   * init gives up waiting for ranks to join. TESSEL_COMM_TIMEOUT; default 30. */
  double timeoutSeconds;
  /* Seconds a call may wait for a live peer to reach the same call. TESSEL_COMM_OP_TIMEOUT;
   * default 0 = no limit (a slow peer is not an error; a dead one is). */
  double opTimeoutSeconds;
  /* 1: compare every collective's (op, count, type, root) across ranks before moving data.
   * TESSEL_COMM_CHECK_CALLS; default 1. */
  int checkCalls;
} tesselConfig_t;

#define TESSEL_CONFIG_INITIALIZER \
  { sizeof(tesselConfig_t), tesselBackendDefault, -1.0, -1.0, -1 }

const char* tesselGetErrorString(tesselResult_t result);
/* The message of the last failure seen on `comm` (or, for NULL, on this thread), e.g.
 * "rank 1 (pid 4242) died while rank 0 waited for it in all_reduce #12". */
const char* tesselGetLastError(tesselComm_t comm);
tesselResult_t tesselGetVersion(int* version);

/* Starts the rendezvous service in this process and describes how to reach it. Call once per
 * communicator, on one rank, and pass the id to every rank. */
tesselResult_t tesselGetUniqueId(tesselUniqueId* uniqueId);
tesselResult_t tesselCommInitRank(tesselComm_t* comm, int nranks, tesselUniqueId commId, int rank);
tesselResult_t tesselCommInitRankConfig(tesselComm_t* comm, int nranks, tesselUniqueId commId,
                                        int rank, const tesselConfig_t* config);
/* This process's rank of the job described by the environment, as torchrun sets it up:
 * TESSEL_RANK / TESSEL_WORLD_SIZE / TESSEL_MASTER_ADDR / TESSEL_MASTER_PORT (set by `tessel
 * launch`), torchrun's RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT, or mpirun's
 * OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE. config may be NULL. */
tesselResult_t tesselCommInitFromEnv(tesselComm_t* comm, const tesselConfig_t* config);
/* nranks communicators in this process (ranks as threads), one per entry of comms. devlist is
 * accepted for NCCL compatibility and ignored on the CPU; it may be NULL. */
tesselResult_t tesselCommInitAll(tesselComm_t* comms, int nranks, const int* devlist);
/* Waits for the communicator's queued calls, then frees it. */
tesselResult_t tesselCommDestroy(tesselComm_t comm);
/* Cancels queued and running calls, tells the peers, frees the communicator. */
tesselResult_t tesselCommAbort(tesselComm_t comm);
/* tesselSuccess, or the error that broke the communicator (a dead peer, a mismatched call). */
tesselResult_t tesselCommGetAsyncError(tesselComm_t comm, tesselResult_t* asyncError);
tesselResult_t tesselCommCount(const tesselComm_t comm, int* count);
tesselResult_t tesselCommUserRank(const tesselComm_t comm, int* rank);

/* Collectives. Buffers hold `count` elements unless said otherwise; send and receive buffers may
 * be the same (in place) where NCCL allows it. */
tesselResult_t tesselAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                               tesselDataType_t datatype, tesselRedOp_t op, tesselComm_t comm,
                               tesselStream_t stream);
tesselResult_t tesselBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                               tesselDataType_t datatype, int root, tesselComm_t comm,
                               tesselStream_t stream);
/* recvbuff is used on root only. */
tesselResult_t tesselReduce(const void* sendbuff, void* recvbuff, size_t count,
                            tesselDataType_t datatype, tesselRedOp_t op, int root,
                            tesselComm_t comm, tesselStream_t stream);
/* recvbuff holds nranks * sendcount elements; in place when sendbuff == recvbuff + rank *
 * sendcount. */
tesselResult_t tesselAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                               tesselDataType_t datatype, tesselComm_t comm, tesselStream_t stream);
/* sendbuff holds nranks * recvcount elements; in place when recvbuff == sendbuff + rank *
 * recvcount. */
tesselResult_t tesselReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                   tesselDataType_t datatype, tesselRedOp_t op, tesselComm_t comm,
                                   tesselStream_t stream);
/* Point to point; messages between two ranks match in the order they were posted. Put the sends
 * and receives of one exchange between tesselGroupStart and tesselGroupEnd. */
tesselResult_t tesselSend(const void* sendbuff, size_t count, tesselDataType_t datatype, int peer,
                          tesselComm_t comm, tesselStream_t stream);
tesselResult_t tesselRecv(void* recvbuff, size_t count, tesselDataType_t datatype, int peer,
                          tesselComm_t comm, tesselStream_t stream);

/* Calls between GroupStart and GroupEnd (on this thread) are issued together at GroupEnd. */
tesselResult_t tesselGroupStart(void);
tesselResult_t tesselGroupEnd(void);

/* Streams and events. */
tesselResult_t tesselStreamCreate(tesselStream_t* stream);
/* A stream for the nccl backend, wrapping a cudaStream_t (passed as void*). */
tesselResult_t tesselStreamCreateFromCuda(void* cudaStream, tesselStream_t* stream);
tesselResult_t tesselStreamDestroy(tesselStream_t stream);
tesselResult_t tesselStreamSynchronize(tesselStream_t stream);
/* tesselSuccess when all calls on the stream finished, tesselInProgress otherwise. */
tesselResult_t tesselStreamQuery(tesselStream_t stream);
tesselResult_t tesselEventCreate(tesselEvent_t* event);
tesselResult_t tesselEventDestroy(tesselEvent_t event);
tesselResult_t tesselEventRecord(tesselEvent_t event, tesselStream_t stream);
tesselResult_t tesselEventSynchronize(tesselEvent_t event);
tesselResult_t tesselEventQuery(tesselEvent_t event);

#ifdef __cplusplus
}
#endif

#endif /* TESSEL_DIST_TESSEL_COMM_H_ */
