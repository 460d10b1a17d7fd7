// The Memory view: the ledger from GET /v1/memory, polled every 2 s: the
// host's, then one panel per accelerator ledger an open model holds (a chat or
// embeddings model on --device cuda).
//
// Key design choice: one request in flight at a time (the next poll is
// scheduled after the previous answer), so a slow server is never flooded.
import { useEffect, useState } from 'preact/hooks';
import { getMemory, type LedgerFigures, type MemoryLedger } from '../api';
import { formatBytes, percent } from '../format';

export const POLL_MS = 2000;

function Bar({ label, value, total, cls, name }: { label: string; value: number; total: number; cls: string; name?: string }) {
  const p = percent(value, total);
  return (
    <div class="bar-row">
      <div class="bar-label">
        <span>{name ?? label}</span>
        <span class="num">{formatBytes(value)}</span>
      </div>
      <div
        class="bar"
        role="meter"
        aria-label={label}
        aria-valuemin={0}
        aria-valuemax={total}
        aria-valuenow={value}
        aria-valuetext={`${formatBytes(value)} of ${formatBytes(total)}`}
      >
        <div class={`fill ${cls}`} style={{ width: `${p}%` }} />
      </div>
    </div>
  );
}

/** The budget split, the live/pending/room bars and the owners of one ledger. */
function LedgerBody({ ledger, prefix }: { ledger: LedgerFigures; prefix: string }) {
  const total = ledger.budget;
  return (
    <>
      <div class="stack" role="img" aria-label={`${prefix}Budget split: live ${formatBytes(ledger.live)}, pending ${formatBytes(ledger.pending)}, room ${formatBytes(ledger.room)}`}>
        <div class="fill live" style={{ width: `${percent(ledger.live, total)}%` }} />
        <div class="fill pending" style={{ width: `${percent(ledger.pending, total)}%` }} />
        <div class="fill room" style={{ width: `${percent(ledger.room, total)}%` }} />
      </div>
      <Bar label={`${prefix}Live`} name="Live" value={ledger.live} total={total} cls="live" />
      <Bar label={`${prefix}Pending`} name="Pending" value={ledger.pending} total={total} cls="pending" />
      <Bar label={`${prefix}Room`} name="Room" value={ledger.room} total={total} cls="room" />
      {prefix ? <h4>Owners</h4> : <h3>Owners</h3>}
      {ledger.owners.length === 0 ? (
        <p class="empty">No owner holds memory now.</p>
      ) : (
        <ul class="owners" aria-label={`${prefix}Owners`}>
          {ledger.owners.map((o) => (
            <li key={o.owner} class="owner">
              <div class="bar-label">
                <span class="owner-name">{o.owner}</span>
                <span class="num">
                  {formatBytes(o.bytes)} · {o.spans} span{o.spans === 1 ? '' : 's'}
                </span>
              </div>
              <div class="bar" role="meter" aria-label={`${prefix}${o.owner} bytes`} aria-valuemin={0} aria-valuemax={total} aria-valuenow={o.bytes}>
                <div class="fill live" style={{ width: `${percent(o.bytes, total)}%` }} />
              </div>
              <ul class="kinds">
                {Object.entries(o.kinds).map(([k, b]) => (
                  <li key={k}>
                    {k}: {formatBytes(b)}
                  </li>
                ))}
              </ul>
            </li>
          ))}
        </ul>
      )}
    </>
  );
}

export function MemoryView() {
  const [ledger, setLedger] = useState<MemoryLedger | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [at, setAt] = useState<Date | null>(null);
  useEffect(() => {
    let stopped = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const ctl = new AbortController();
    const tick = async () => {
      try {
        setLedger(await getMemory(ctl.signal));
        setError(null);
        setAt(new Date());
      } catch (e) {
        if (!stopped) setError((e as Error).message);
      }
      if (!stopped) timer = setTimeout(tick, POLL_MS);
    };
    void tick();
    return () => {
      stopped = true;
      ctl.abort();
      clearTimeout(timer);
    };
  }, []);

  if (!ledger) {
    return <p class="notice">{error ? `Could not read the ledger: ${error}` : 'Reading the ledger…'}</p>;
  }
  return (
    <div class="memory">
      <h2>Memory ledger</h2>
      <dl class="facts">
        <div>
          <dt>Device</dt>
          <dd>{ledger.device}</dd>
        </div>
        <div>
          <dt>Resident runtime</dt>
          <dd data-testid="resident">{ledger.resident ?? 'none'}</dd>
        </div>
        <div>
          <dt>Embeddings runtime</dt>
          <dd data-testid="embeddings">{ledger.embeddings ?? 'none'}</dd>
        </div>
        <div>
          <dt>Budget</dt>
          <dd>
            {formatBytes(ledger.budget)}
            {ledger.cap !== null && ` (cap ${formatBytes(ledger.cap)})`}
          </dd>
        </div>
      </dl>
      <LedgerBody ledger={ledger} prefix="" />
      {(ledger.devices ?? []).map((d) => (
        <section key={d.device} class="device-ledger" aria-label={`${d.device} ledger`}>
          <h3>Accelerator {d.device}</h3>
          <dl class="facts">
            <div>
              <dt>Budget</dt>
              <dd>
                {formatBytes(d.budget)}
                {d.cap !== null && ` (cap ${formatBytes(d.cap)})`}
              </dd>
            </div>
          </dl>
          <LedgerBody ledger={d} prefix={`${d.device} `} />
        </section>
      ))}
      <p class="updated" aria-live="off">
        {error ? `Last refresh failed: ${error}` : at ? `Updated ${at.toLocaleTimeString()} · every ${POLL_MS / 1000} s` : ''}
      </p>
    </div>
  );
}
