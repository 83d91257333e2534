/*
 * mem_account.h - what the allocator (alloc.c) calls on accounts; the public
 * side of accounts is in alloc.h.
 */
#ifndef SLIM_MEM_ACCOUNT_H
#define SLIM_MEM_ACCOUNT_H

#include "alloc.h"

/* Reserves bytes (the rounded size; size is what was asked, for the
 * message) in acct's total and in its slot for device (slot -1: the total
 * only). On refusal fills err with whose limit it was and returns false.
 * held[0] / held[1]: the total / the slot's bytes after the charge. */
bool slim_mem_account_charge(slim_mem_account *acct, int slot, const char *device, size_t bytes,
                             size_t size, size_t held[2], slim_err *err);
/* After the block is really there: raises the peaks to held. */
void slim_mem_account_note_peak(slim_mem_account *acct, int slot, const size_t held[2]);
void slim_mem_account_credit(slim_mem_account *acct, int slot, size_t bytes);

#endif
