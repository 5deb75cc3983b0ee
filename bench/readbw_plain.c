/* The yardstick for `attn bench --decode`'s read bandwidth: a plain
 * 8-accumulator sum over 256 MiB, built for this CPU by the compiler
 * (gcc -O3 -march=native -ffast-math -fopenmp bench/readbw_plain.c), 15
 * passes, median and max GB/s on OMP_NUM_THREADS threads. bench/readbw_check.sh
 * runs it alternating with the bench's own figure. */
#include <stdio.h>
#include <stdlib.h>
#include <omp.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
int main(int c,char**v){size_t n=(size_t)256<<20>>2; float*p=malloc(n*4); for(size_t i=0;i<n;i++)p[i]=(float)(i&7);
 double best[64]; int r=0; float sink=0;
 for(r=0;r<15;r++){double t=now(); float s0=0,s1=0,s2=0,s3=0,s4=0,s5=0,s6=0,s7=0;
 #pragma omp parallel for reduction(+:s0,s1,s2,s3,s4,s5,s6,s7)
 for(size_t i=0;i<n;i+=8){s0+=p[i];s1+=p[i+1];s2+=p[i+2];s3+=p[i+3];s4+=p[i+4];s5+=p[i+5];s6+=p[i+6];s7+=p[i+7];}
 sink+=s0+s1+s2+s3+s4+s5+s6+s7; best[r]=n*4/(now()-t)*1e-9;}
 for(int i=0;i<15;i++)for(int j=i+1;j<15;j++)if(best[j]<best[i]){double x=best[i];best[i]=best[j];best[j]=x;}
 printf("plain sum %d thr: median %.1f GB/s max %.1f (%g)\n",omp_get_max_threads(),best[7],best[14],sink);}
