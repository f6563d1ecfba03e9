export function signalPid(pid: number, signal: NodeJS.Signals | 0): boolean;
export function signalGroup(pgid: number, signal: NodeJS.Signals | 0): boolean;
export function readPidFile(file: string): number | undefined;
export function writeFileAtomic(file: string, text: string): void;
