import type { ChildProcess } from 'node:child_process';
export function procStat(
  pid: number,
  tid?: number | string,
): { state: string; pgrp: number; starttime: string } | undefined;
export function isAlive(pid: number): boolean;
export function signalIfAlive(pid: number, signal: NodeJS.Signals): boolean;
export function stopProcess(child: ChildProcess, graceMs: number, signal?: NodeJS.Signals): Promise<void>;
