/* clock — monotonic wall time for latency metrics and speed reports. */
#ifndef VC_CLOCK_H
#define VC_CLOCK_H

/* Seconds on CLOCK_MONOTONIC (arbitrary origin; use differences). */
double vc_now_s(void);

#endif
