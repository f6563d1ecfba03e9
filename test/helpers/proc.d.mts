export function procStat(pid: number, tid?: number | string): { state: string; starttime: string } | undefined;
export function isAlive(pid: number): boolean;
