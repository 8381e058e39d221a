--[[
spotcap admission on Slurm (ADR-04): a job_submit/lua filter.

A job submitted to a partition on reclaimable capacity must name a workload whose interruption
contract is published for Slurm:

    sbatch --partition=reclaimable --comment=spotcap:workload=genomics-align job.sh
    sbatch --partition=reclaimable --wckey=genomics-align job.sh

In the comment, `spotcap:workload=<id>` is a word of its own: it starts the comment or follows
whitespace, ';' or ',', and the id runs to the next of those or the end; it must equal a
published id exactly. A comment naming two different workloads is refused. The comment wins
over the wckey (taken whole, less Slurm's default-marking '*'). The published list is the file `spotcap contracts compile`
writes as published-contracts.slurm (one "<workload id> <bundle sha256>" a line, '#' comments);
only contracts with `scheduler: slurm` are in it. It is read on every submission to a
reclaimable partition, so a new compile takes effect without restarting slurmctld.
`scontrol update` is checked too: moving a job onto a reclaimable partition, or changing the
comment or wckey of a job whose current or new partition is reclaimable. If it
cannot be read, jobs on reclaimable partitions are refused (fail closed); others are untouched.

Configuration, from slurmctld's environment (e.g. Environment= in its systemd unit):
    SPOTCAP_RECLAIMABLE_PARTITIONS  comma-separated partition names  (default: reclaimable)
    SPOTCAP_PUBLISHED_CONTRACTS     path of the published list
                                    (default: /etc/slurm/spotcap/published-contracts.slurm)

Install as job_submit.lua next to slurm.conf, with JobSubmitPlugins=lua.
]]

local DEFAULT_PARTITIONS = "reclaimable"
local DEFAULT_PUBLISHED = "/etc/slurm/spotcap/published-contracts.slurm"
local SEPARATORS = "%s;,"
local WORKLOAD_KEY = "spotcap:workload="

local function reclaimable_partitions()
   local names = {}
   local configured = os.getenv("SPOTCAP_RECLAIMABLE_PARTITIONS") or DEFAULT_PARTITIONS
   for name in string.gmatch(configured, "[^,%s]+") do
      names[name] = true
   end
   return names
end

local function published_path()
   return os.getenv("SPOTCAP_PUBLISHED_CONTRACTS") or DEFAULT_PUBLISHED
end

-- The set of published workload ids, or nil and the reason.
local function published_contracts(path)
   local file, reason = io.open(path, "r")
   if file == nil then
      return nil, reason
   end
   local published = {}
   for line in file:lines() do
      if not string.match(line, "^%s*#") then
         local id = string.match(line, "^%s*(%S+)")
         if id ~= nil then
            published[id] = true
         end
      end
   end
   file:close()
   return published
end

-- The partitions a job asks for: its --partition list, else the cluster's default partition.
local function requested_partitions(partition, part_list)
   local names = {}
   if partition ~= nil and partition ~= "" then
      for name in string.gmatch(partition, "[^,%s]+") do
         table.insert(names, name)
      end
   elseif part_list ~= nil then
      for _, part in pairs(part_list) do
         if part.flag_default == 1 or part.flag_default == true then
            table.insert(names, part.name)
         end
      end
   end
   return names
end

-- The workload a job names and where it was found; or nil, and the ids if the comment names
-- more than one.
local function workload_of(comment, wckey)
   if comment ~= nil then
      local found, ids = nil, {}
      for word in string.gmatch(comment, "[^" .. SEPARATORS .. "]+") do
         if string.sub(word, 1, #WORKLOAD_KEY) == WORKLOAD_KEY then
            local id = string.sub(word, #WORKLOAD_KEY + 1)
            if found == nil then
               found = id
            elseif id ~= found then
               table.insert(ids, id)
            end
         end
      end
      if #ids > 0 then
         table.insert(ids, 1, found)
         return nil, nil, ids
      end
      if found ~= nil then
         return found, "--comment"
      end
   end
   if wckey ~= nil and wckey ~= "" then
      -- Slurm marks a default wckey with a leading '*'.
      return (string.gsub(wckey, "^%*", "")), "--wckey"
   end
   return nil, nil
end

local function admit(partition, comment, wckey, part_list, uid)
   local reclaimable = reclaimable_partitions()
   local targeted, seen = {}, {}
   for _, name in ipairs(requested_partitions(partition, part_list)) do
      if reclaimable[name] and not seen[name] then
         seen[name] = true
         table.insert(targeted, name)
      end
   end
   if #targeted == 0 then
      return slurm.SUCCESS
   end
   local where = table.concat(targeted, ",")
   local workload, source, several = workload_of(comment, wckey)
   if several ~= nil then
      slurm.log_user("spotcap: the comment names more than one workload (%s); a job on "
         .. "reclaimable partition %s must name exactly one", table.concat(several, ", "), where)
      slurm.log_info("spotcap: refused a job of uid %s on %s: several workloads named", uid, where)
      return slurm.ERROR
   end
   if workload == nil then
      slurm.log_user("spotcap: partition %s runs on reclaimable capacity and needs a published "
         .. "interruption contract: submit with --comment=spotcap:workload=<workload id> "
         .. "(or --wckey=<workload id>)", where)
      slurm.log_info("spotcap: refused a job of uid %s on %s: no workload named", uid, where)
      return slurm.ERROR
   end
   local path = published_path()
   local published, reason = published_contracts(path)
   if published == nil then
      slurm.log_user("spotcap: the list of published contracts cannot be read, so jobs on "
         .. "reclaimable partitions are refused for now; tell the platform team (%s)", path)
      slurm.log_info("spotcap: cannot read %s: %s", path, tostring(reason))
      return slurm.ERROR
   end
   if not published[workload] then
      slurm.log_user("spotcap: workload '%s' (from %s) has no published interruption contract "
         .. "for Slurm, so it cannot run on partition %s; publish its contract with "
         .. "`spotcap contracts compile` (scheduler: slurm) or correct the workload id",
         workload, source, where)
      slurm.log_info("spotcap: refused a job of uid %s on %s: workload %s unpublished",
         uid, where, workload)
      return slurm.ERROR
   end
   slurm.log_info("spotcap: admitted a job of uid %s on %s for workload %s", uid, where, workload)
   return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
   return admit(job_desc.partition, job_desc.comment, job_desc.wckey, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   -- Moving a job onto a reclaimable partition needs a contract; so does renaming the workload
   -- (comment or wckey) of a job whose current or new partition is reclaimable.
   local renamed = job_desc.comment ~= nil or job_desc.wckey ~= nil
   local partitions = {}
   if job_desc.partition ~= nil then
      table.insert(partitions, job_desc.partition)
   end
   if renamed and job_rec ~= nil and job_rec.partition ~= nil then
      table.insert(partitions, job_rec.partition)
   end
   if #partitions == 0 and not renamed then
      return slurm.SUCCESS
   end
   local comment = job_desc.comment or (job_rec and job_rec.comment)
   local wckey = job_desc.wckey or (job_rec and job_rec.wckey)
   return admit(table.concat(partitions, ","), comment, wckey, part_list, modify_uid)
end

return slurm.SUCCESS
