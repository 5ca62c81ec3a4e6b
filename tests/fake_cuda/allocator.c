/* A stand-in for PyTorch's caching allocator (libc10_cuda.so): it queries the events of blocks
   freed with uses on other streams, as the real one does on every allocation. Built as
   libc10_cuda_allocator.so, so that the stream gate sees the call come from libc10_cuda. */
typedef int cudaError_t;

cudaError_t cudaEventQuery(void *);

int allocator_query(void *event) { return cudaEventQuery(event); }
