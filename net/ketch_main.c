/* placeholder until the server lands */
#include <stdio.h>
int main(void) {
  fprintf(stderr, "ketch: not yet\n");
  return 1;
}
