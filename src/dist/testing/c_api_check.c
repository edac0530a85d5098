/* Build-time check that tessel_comm.h is a C header: compiled as C11 with warnings as errors and
 * linked against libtessel, using the API the way a C program would. */
#include <stdio.h>

#include "dist/tessel_comm.h"

int main(void) {
  tesselComm_t comms[2];
  tesselConfig_t config = TESSEL_CONFIG_INITIALIZER;
  float data[4] = {1, 2, 3, 4};
  (void)config;
  if (tesselCommInitAll(comms, 1, NULL) != tesselSuccess) {
    fprintf(stderr, "%s\n", tesselGetLastError(NULL));
    return 1;
  }
  tesselAllReduce(data, data, 4, tesselFloat32, tesselSum, comms[0], NULL);
  tesselResult_t result = tesselStreamSynchronize(NULL);
  tesselCommDestroy(comms[0]);
  printf("%s %g\n", tesselGetErrorString(result), data[3]);
  return result == tesselSuccess && data[3] == 4 ? 0 : 1;
}
